package leangrpc

import (
	"context"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/connectivity"
)

// The connectivity API of grpc-go's ClientConn, with the states grpc-go's
// pick_first reports. Nothing here is on the call path: the state is
// derived, under mu, from the fields the dial machinery keeps anyway (the
// connection, the dial in progress, the last dial error), so a call reads
// only the published connection, as before. Waiters are woken through
// stateCh, made only when someone waits; the idle timeout is a timer that
// looks at the connection's stream ids, so calls count nothing.

// GetState returns the ClientConn's connectivity state: IDLE before the
// first call or Connect and after the idle timeout or a lost connection,
// CONNECTING while the first dials run, READY with a connection up,
// TRANSIENT_FAILURE once every address failed (it stays there, redialing
// with backoff, until a connection is up, as grpc-go's pick_first does),
// and SHUTDOWN after Close.
func (cc *ClientConn) GetState() connectivity.State {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.stateLocked()
}

// WaitForStateChange waits until the state differs from sourceState and
// returns true, or returns false when ctx ends first.
func (cc *ClientConn) WaitForStateChange(ctx context.Context, sourceState connectivity.State) bool {
	for {
		cc.mu.Lock()
		s := cc.stateLocked()
		if s != sourceState {
			cc.mu.Unlock()
			return true
		}
		if cc.stateCh == nil {
			cc.stateCh = make(chan struct{})
		}
		ch := cc.stateCh
		// A READY connection is lost without anyone taking mu: the
		// waiter watches the connection itself.
		var conn *h2conn.Conn
		if s == connectivity.Ready {
			conn = cc.conn
		}
		cc.mu.Unlock()
		var lost <-chan struct{}
		if conn != nil {
			lost = conn.GoingAway()
		}
		select {
		case <-ch:
		case <-lost:
		case <-ctx.Done():
			return false
		}
	}
}

// Connect makes an IDLE ClientConn connect, without waiting for the
// connection; in any other state it does nothing.
func (cc *ClientConn) Connect() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.stateLocked() != connectivity.Idle || cc.closed {
		return
	}
	cc.dropLostConnLocked()
	cc.startDialLocked()
}

// ResetConnectBackoff forgets the reconnect backoff: a ClientConn in
// TRANSIENT_FAILURE dials again at once.
func (cc *ClientConn) ResetConnectBackoff() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed {
		return
	}
	cc.retryNowLocked()
}

// stateLocked derives the connectivity state; mu must be held. A
// connection that is going away counts as lost: pick_first goes IDLE when
// its READY connection ends, and the next call or Connect dials again.
// A dial after a failure leaves the state in TRANSIENT_FAILURE (gRFC
// A62's sticky TRANSIENT_FAILURE, as in grpc-go).
func (cc *ClientConn) stateLocked() connectivity.State {
	switch {
	case cc.closed:
		return connectivity.Shutdown
	case cc.conn != nil && !cc.conn.IsGoingAway():
		return connectivity.Ready
	case cc.lastErr != nil:
		return connectivity.TransientFailure
	case cc.dialing != nil:
		return connectivity.Connecting
	}
	return connectivity.Idle
}

// stateChangedLocked wakes the WaitForStateChange calls; mu must be held.
// It runs whenever a field stateLocked reads changes, and a waiter that
// finds the state unchanged waits again.
func (cc *ClientConn) stateChangedLocked() {
	if cc.stateCh != nil {
		close(cc.stateCh)
		cc.stateCh = nil
	}
}

// dropLostConnLocked moves a connection that is going away to the
// draining ones; the next dial asks the resolver again.
func (cc *ClientConn) dropLostConnLocked() {
	if c := cc.conn; c != nil && c.IsGoingAway() {
		cc.setConn(nil, nil)
		cc.old = append(pruneDone(cc.old), c)
		cc.reresolve = true
	}
}

// startDialLocked starts a dial and returns the channel it closes when
// done; mu must be held and no dial may be running. It also starts the
// idle timer: a ClientConn that dials has left IDLE.
func (cc *ClientConn) startDialLocked() chan struct{} {
	ch := make(chan struct{})
	cc.dialing = ch
	if cc.retryTimer != nil {
		cc.retryTimer.Stop()
		cc.retryTimer = nil
	}
	if d := cc.opts.idleTimeout; d > 0 && cc.idleTimer == nil {
		cc.idleConn = nil
		cc.idleTimer = time.AfterFunc(d, cc.checkIdle)
	}
	cc.stateChangedLocked()
	go cc.dial(ch)
	return ch
}

// scheduleRetryLocked arms the redial after a failed dial; mu must be
// held.
func (cc *ClientConn) scheduleRetryLocked(delay time.Duration) {
	if cc.retryTimer != nil {
		cc.retryTimer.Stop()
	}
	cc.retryTimer = time.AfterFunc(delay, cc.retryDial)
}

// retryDial is the retry timer's: it dials unless a call already did, the
// ClientConn went idle, or the backoff was pushed back.
func (cc *ClientConn) retryDial() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.retryTimer = nil
	if cc.closed || cc.dialing != nil || cc.lastErr == nil || time.Until(cc.retryAt) > 0 {
		return
	}
	if cc.conn != nil && !cc.conn.IsGoingAway() {
		return
	}
	cc.dropLostConnLocked()
	cc.startDialLocked()
}

// retryNowLocked ends the backoff: the calls waiting for the next attempt
// are woken, and a ClientConn in TRANSIENT_FAILURE dials at once; mu must
// be held.
func (cc *ClientConn) retryNowLocked() {
	cc.retries = 0
	cc.retryAt = time.Time{}
	if cc.wakeCh != nil {
		close(cc.wakeCh)
		cc.wakeCh = nil
	}
	if cc.lastErr != nil && cc.dialing == nil && cc.conn == nil {
		cc.startDialLocked()
	}
}

// stopTimersLocked stops the retry and idle timers; mu must be held.
func (cc *ClientConn) stopTimersLocked() {
	if cc.retryTimer != nil {
		cc.retryTimer.Stop()
		cc.retryTimer = nil
	}
	if cc.idleTimer != nil {
		cc.idleTimer.Stop()
		cc.idleTimer = nil
	}
	cc.idleConn = nil
}

// checkIdle is the idle timer's: it runs every idle timeout while the
// ClientConn is out of IDLE and enters IDLE when nothing happened since
// the last run. A call shows up as a stream open on the connection or as
// a new stream id; a dial running or a call waiting for one (wakeCh)
// keeps the ClientConn busy too.
func (cc *ClientConn) checkIdle() {
	cc.mu.Lock()
	if cc.closed || cc.idleTimer == nil {
		cc.mu.Unlock()
		return
	}
	busy := cc.dialing != nil || cc.wakeCh != nil
	if c := cc.conn; c != nil {
		active, next := c.StreamActivity()
		// A stream open at the last look may have ended just now: the
		// ClientConn has been without calls for a whole timeout only if
		// none was open then either.
		if active > 0 || cc.idleActive || c != cc.idleConn || next != cc.idleNextID {
			busy = true
		}
		cc.idleConn, cc.idleNextID, cc.idleActive = c, next, active > 0
	} else if cc.idleConn != nil {
		busy = true // the connection changed since the last look
		cc.idleConn = nil
	}
	for _, c := range cc.old {
		if active, _ := c.StreamActivity(); active > 0 && !c.Ended() {
			busy = true
		}
	}
	if busy {
		cc.idleTimer.Reset(cc.opts.idleTimeout)
		cc.mu.Unlock()
		return
	}
	// Enter IDLE: let go of the connections and the resolver; the next
	// dial builds a new resolver, as grpc-go does when it leaves idle.
	cc.idleTimer = nil
	cc.idleConn = nil
	if cc.retryTimer != nil {
		cc.retryTimer.Stop()
		cc.retryTimer = nil
	}
	conns := append(cc.old, cc.conn)
	cc.old = nil
	cc.setConn(nil, nil)
	cc.lastErr = nil
	cc.retries = 0
	cc.retryAt = time.Time{}
	cc.reresolve = false
	rc := cc.res
	cc.res = newResolverConn(cc)
	cc.stateChangedLocked()
	cc.mu.Unlock()
	rc.close()
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}
