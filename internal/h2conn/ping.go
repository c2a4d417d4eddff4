package h2conn

import (
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// PING payloads of the engine's own pings, told apart on the ACK.
var (
	bdpPingData       = [8]byte{'l', 'g', 'b', 'd', 'p', 0, 0, 1}
	keepalivePingData = [8]byte{'l', 'g', 'k', 'a', 0, 0, 0, 2}
	shutdownPingData  = [8]byte{'l', 'g', 'g', 'o', 'a', 'w', 'a', 'y'}
)

// timeNow is the engine's clock.
var timeNow = time.Now

// onPing answers a PING at once (the ACK carries the same payload) and,
// on a server, enforces the keepalive policy; an ACK ends a BDP sample, a
// keepalive wait or the first phase of a graceful shutdown.
func (c *Conn) onPing(f *h2frame.PingFrame) *Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.IsAck() {
		switch f.Data {
		case bdpPingData:
			c.bdp.onAck(timeNow())
		case keepalivePingData:
			c.timers.kaPingOut = false
			if c.timers.kaWaiting {
				// The next ping is due Time after this ACK, the last
				// frame read.
				every, _, _ := c.keepaliveParams()
				c.timers.kaWaiting = false
				c.timers.keepalive.Reset(every)
			}
		case shutdownPingData:
			c.shutdownPhase2Locked()
		}
		return nil
	}
	if c.role == RoleServer {
		if cerr := c.pingPolicyLocked(timeNow()); cerr != nil {
			return cerr
		}
	}
	c.queueCtrlLocked(ctrlFrame{kind: ctrlPingAck, data: f.Data}, true)
	return c.ctrlQueueErrLocked()
}

// pingPolicyLocked is grpc-go's keepalive enforcement: a ping sooner than
// PingMinTime after the previous one, or within two hours while there are
// no streams and PingPermitWithoutStream is off, is a strike; more than
// maxPingStrikes end the connection with GOAWAY ENHANCE_YOUR_CALM
// "too_many_pings". Sending HEADERS or DATA forgives the strikes.
func (c *Conn) pingPolicyLocked(now time.Time) *Error {
	last := c.lastPingAt
	c.lastPingAt = now.UnixNano()
	if c.resetStrikes {
		c.resetStrikes = false
		c.pingStrikes = 0
		return nil
	}
	if last == 0 {
		return nil
	}
	minGap := c.cfg.PingMinTime
	if c.numPeer == 0 && !c.cfg.PingPermitWithoutStream {
		minGap = pingWithoutStreamMinTime
	}
	if minGap > 0 && time.Duration(now.UnixNano()-last) < minGap {
		c.pingStrikes++
	}
	if c.pingStrikes > maxPingStrikes {
		return connErr(h2frame.ErrCodeEnhanceYourCalm, "too_many_pings")
	}
	return nil
}
