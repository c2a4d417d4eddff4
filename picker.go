package leangrpc

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every call asks the balancer's current picker for a SubConn, as grpc-go's
// calls do. The picker is published in an atomic pointer, so a call reads
// one pointer and makes one interface call when a connection is ready. A
// call that must wait for the next picker makes the current one's
// replaced channel, which closes when the next is published: an idle
// channel, whose calls never waited or waited for a picker long replaced,
// holds no channel.

// pickerGen is one picker the balancer published, or a state without one.
type pickerGen struct {
	picker balancer.Picker // nil: calls wait for the next
	// replaced, made by the first call that waits for the next
	// pickerGen, is closed when the next is published; guarded by the
	// ClientConn's mu.
	replaced chan struct{}
	// idle marks the ClientConn in IDLE (no resolver, no balancer): the
	// first call leaves it. closed marks the ClientConn closed.
	idle, closed bool
}

// idlePickers and closedPickers are the pickerGens of an idle and of a
// closed ClientConn, shared: no call waits for their replacement.
var (
	idlePickers   = &pickerGen{idle: true}
	closedPickers = &pickerGen{closed: true}
)

// picked is the outcome of a pick: the ready connection and what the
// balancer wants to hear when the call ends.
type picked struct {
	*readyConn
	done    func(balancer.DoneInfo) // nil unless the balancer asked
	md      map[string][]string     // added to the request's metadata (balancer.PickResult.Metadata)
	blocked bool                    // the call waited for a picker
}

// pick returns a ready connection for a call of method, waiting for the
// balancer as grpc-go does: a picker that has no SubConn ready
// (balancer.ErrNoSubConnAvailable) makes the call wait for the next one; a
// status error fails the call with that status; any other error fails
// the call with Unavailable unless it waits for ready, in which case it
// waits for the next picker. ctx ending ends the wait.
func (cc *ClientConn) pick(ctx context.Context, method string, waitForReady bool) (picked, error) {
	var seen *pickerGen // a picker already asked
	var lastErr error
	blocked := false
	for {
		g := cc.pickers.Load()
		switch {
		case g.closed:
			return picked{}, errConnClosing
		case g.idle:
			cc.exitIdle()
			continue
		}
		if g.picker == nil || g == seen {
			blocked = true
			if err := cc.waitPicker(ctx, g, lastErr); err != nil {
				return picked{}, err
			}
			continue
		}
		seen = g
		res, err := g.picker.Pick(balancer.PickInfo{FullMethodName: method, Ctx: ctx})
		if err != nil {
			if err == balancer.ErrNoSubConnAvailable {
				continue
			}
			if _, ok := status.FromError(err); ok {
				return picked{}, restrictPickStatus(err)
			}
			if waitForReady {
				lastErr = err
				continue
			}
			return picked{}, status.Error(codes.Unavailable, err.Error())
		}
		sc, ok := res.SubConn.(*subConn)
		if !ok {
			// A balancer must hand back the SubConns NewSubConn made
			// (wrapping them is allowed only for its own use).
			logger.Errorf("picker returned a SubConn of type %T, not one this ClientConn made", res.SubConn)
			continue
		}
		if r := sc.ready.Load(); r != nil && !r.conn.IsGoingAway() {
			return picked{readyConn: r, done: res.Done, md: res.Metadata, blocked: blocked}, nil
		}
		// The SubConn was lost after the picker was made; the balancer
		// publishes a new picker soon.
		if res.Done != nil {
			res.Done(balancer.DoneInfo{})
		}
	}
}

// waitPicker waits for the pickerGen after g, counting the call as one
// that keeps the ClientConn out of IDLE.
func (cc *ClientConn) waitPicker(ctx context.Context, g *pickerGen, lastErr error) error {
	cc.mu.Lock()
	if cc.pickers.Load() != g {
		cc.mu.Unlock()
		return nil
	}
	if g.replaced == nil {
		g.replaced = make(chan struct{})
	}
	ch := g.replaced
	cc.mu.Unlock()
	cc.waitingPicks.Add(1)
	defer cc.waitingPicks.Add(-1)
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	var msg string
	if lastErr != nil {
		msg = "latest balancer error: " + lastErr.Error()
	} else {
		msg = fmt.Sprintf("%v while waiting for connections to become ready", ctx.Err())
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, msg)
	}
	return status.Error(codes.Canceled, msg)
}

// restrictPickStatus keeps a balancer from failing calls with the codes
// gRFC A54 reserves for the application and the server.
func restrictPickStatus(err error) error {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition,
		codes.Aborted, codes.OutOfRange, codes.DataLoss:
		return status.Errorf(codes.Internal, "received picker error with illegal status: %v", err)
	}
	return err
}

// publishPickerLocked makes g the picker of the calls and wakes the calls
// that wait for one; mu must be held.
func (cc *ClientConn) publishPickerLocked(g *pickerGen) {
	old := cc.pickers.Swap(g)
	if old != nil && old.replaced != nil {
		close(old.replaced)
		old.replaced = nil
	}
}
