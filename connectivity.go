package leangrpc

import (
	"context"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/connectivity"
)

// The connectivity API of grpc-go's ClientConn and its idle mode. The state
// is the balancer's (what its UpdateState says), IDLE while the ClientConn
// is idle, SHUTDOWN after Close. Nothing here is on the call path: a call
// reads the picker only. The idle timeout is a timer that looks at the
// connections' stream ids, so calls count nothing.

// GetState returns the ClientConn's connectivity state.
func (cc *ClientConn) GetState() connectivity.State {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.state
}

// WaitForStateChange waits until the state differs from sourceState and
// returns true, or returns false when ctx ends first.
func (cc *ClientConn) WaitForStateChange(ctx context.Context, sourceState connectivity.State) bool {
	cc.mu.Lock()
	for cc.state == sourceState {
		if cc.stateCh == nil {
			cc.stateCh = make(chan struct{})
		}
		ch := cc.stateCh
		cc.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
		cc.mu.Lock()
	}
	cc.mu.Unlock()
	return true
}

// Connect makes an IDLE ClientConn connect without waiting for a call: it
// leaves idle mode and asks the balancer to leave its own IDLE.
func (cc *ClientConn) Connect() {
	cc.exitIdle()
	cc.ser.schedule(func() {
		cc.mu.Lock()
		bw := cc.bw
		cc.mu.Unlock()
		if bw != nil && !bw.isClosed() {
			bw.bal.ExitIdle()
		}
	})
}

// ResetConnectBackoff ends the reconnect backoff of every SubConn: those
// in TRANSIENT_FAILURE go IDLE at once and their balancer reconnects.
func (cc *ClientConn) ResetConnectBackoff() {
	cc.mu.Lock()
	bw := cc.bw
	cc.mu.Unlock()
	if bw == nil {
		return
	}
	for _, sc := range bw.current() {
		sc.resetBackoff()
	}
}

// setStateLocked changes the connectivity state and wakes the
// WaitForStateChange calls; mu must be held.
func (cc *ClientConn) setStateLocked(s connectivity.State) {
	if cc.state == connectivity.Shutdown || cc.state == s {
		return
	}
	cc.state = s
	if cc.stateCh != nil {
		close(cc.stateCh)
		cc.stateCh = nil
	}
}

// balancerState publishes what a balancer's UpdateState gave, unless the
// ClientConn went idle or closed, or another balancer replaced bw.
func (cc *ClientConn) balancerState(bw *balancerWrapper, s balancer.State) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed || cc.idle || (cc.bw != nil && cc.bw != bw) {
		return
	}
	cc.publishPickerLocked(&pickerGen{picker: s.Picker})
	cc.setStateLocked(s.ConnectivityState)
}

// failLocked publishes a picker that fails calls with err and enters
// TRANSIENT_FAILURE: what a channel without a usable balancer does (its
// resolver failed before any balancer, or gave an invalid service
// config); mu must be held.
func (cc *ClientConn) failLocked(err error) {
	cc.publishPickerLocked(&pickerGen{picker: base.NewErrPicker(err)})
	cc.setStateLocked(connectivity.TransientFailure)
}

// exitIdle leaves idle mode: it builds the resolver, whose first report
// builds the balancer. Calls wait for the balancer's first picker. It does
// nothing unless the ClientConn is idle.
func (cc *ClientConn) exitIdle() {
	cc.mu.Lock()
	if cc.closed || !cc.idle {
		cc.mu.Unlock()
		return
	}
	cc.idle = false
	rc := newResolverConn(cc)
	cc.res = rc
	cc.setStateLocked(connectivity.Connecting)
	cc.publishPickerLocked(&pickerGen{})
	if d := cc.opts.idleTimeout; d > 0 && !cc.idleChecking {
		cc.scheduleIdleCheckLocked(d)
	}
	cc.mu.Unlock()
	if err := cc.startResolver(rc); err != nil {
		cc.resolverError(rc, err)
	}
}

// forgetSubConn drops a SubConn that was shut down.
func (cc *ClientConn) forgetSubConn(sc *subConn) { sc.bw.forget(sc) }

// keepDraining holds a connection that finishes its calls before it
// closes, so that Close and idle mode can end it.
func (cc *ClientConn) keepDraining(c *h2conn.Conn) {
	cc.mu.Lock()
	cc.old = append(pruneDone(cc.old), c)
	cc.mu.Unlock()
}

// checkIdle is the idle check: it runs every idle timeout while the
// ClientConn is out of IDLE and enters IDLE when nothing happened since
// the last run. A call shows up as a stream open on a connection or as a
// new stream id; a SubConn connecting, or a call waiting for a picker,
// keeps the ClientConn busy too.
func (cc *ClientConn) checkIdle() {
	cc.mu.Lock()
	if cc.closed || cc.idle || !cc.idleChecking {
		cc.mu.Unlock()
		return
	}
	busy := cc.waitingPicks.Load() > 0
	var scs []*subConn
	if cc.bw != nil {
		scs = cc.bw.current()
	}
	for _, sc := range scs {
		sc.mu.Lock()
		if sc.state == connectivity.Connecting {
			busy = true
		}
		if c := sc.conn; c != nil {
			active, next := c.StreamActivity()
			// A stream open at the last look may have ended just
			// now: the connection has been without calls for a whole
			// timeout only if none was open then either.
			if active > 0 || sc.idleActive || c != sc.idleConn || next != sc.idleNextID {
				busy = true
			}
			sc.idleConn, sc.idleNextID, sc.idleActive = c, next, active > 0
		} else if sc.idleConn != nil {
			busy = true // the connection changed since the last look
			sc.idleConn = nil
		}
		sc.mu.Unlock()
	}
	for _, c := range cc.old {
		if active, _ := c.StreamActivity(); active > 0 && !c.Ended() {
			busy = true
		}
	}
	if busy {
		cc.scheduleIdleCheckLocked(cc.opts.idleTimeout)
		cc.mu.Unlock()
		return
	}
	cc.enterIdleLocked()
}

// enterIdleLocked lets go of the resolver, the balancer and every
// connection; the next call or Connect builds them anew, as grpc-go does
// when it leaves idle mode. mu must be held; it is released.
func (cc *ClientConn) enterIdleLocked() {
	cc.cancelIdleCheckLocked()
	cc.idle = true
	rc, bw := cc.res, cc.bw
	cc.res, cc.bw = nil, nil
	cc.resolverConfig = false
	cc.publishPickerLocked(idlePickers)
	cc.setStateLocked(connectivity.Idle)
	cc.mu.Unlock()
	rc.close()
	if bw != nil {
		cc.ser.run(bw.close)
	}
	cc.mu.Lock()
	conns := cc.old
	cc.old = nil
	cc.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
