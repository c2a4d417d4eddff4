package h2conn

import (
	"time"
	"weak"

	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// timers are the connection's time.AfterFunc timers: no goroutine waits on
// them between firings.
type timers struct {
	settings  *time.Timer  // SETTINGS ACK timeout
	keepalive *sharedTimer // client (or server) keepalive ping
	age       *ageTimers   // nil unless MaxConnectionIdle or MaxConnectionAge is set
	kaSentAt  int64        // unix nanoseconds the keepalive PING went out
	kaWaiting bool         // keepalive fired a PING and waits for the ACK
	kaPingOut bool         // a keepalive PING is outstanding
}

// ageTimers are a server's connection lifetime timers, which most servers
// do not configure: a separate allocation keeps them out of every Conn.
type ageTimers struct {
	idle      *time.Timer // server MaxConnectionIdle
	age       *time.Timer // server MaxConnectionAge
	grace     *time.Timer // server MaxConnectionAgeGrace
	idleSince time.Time   // when the last stream closed (or the timers started); monotonic
}

// keepaliveParams returns the role's keepalive ping settings.
func (c *Conn) keepaliveParams() (every, timeout time.Duration, withoutStreams bool) {
	if c.role == RoleClient {
		return c.cfg.KeepaliveTime, c.cfg.KeepaliveTimeout, c.cfg.KeepalivePermitWithoutStream
	}
	return c.cfg.ServerKeepaliveTime, c.cfg.ServerKeepaliveTimeout, true
}

func (c *Conn) startTimersLocked() {
	awaitingPreface := c.role == RoleServer && c.state.Load()&statePrefaced == 0
	if c.cfg.SettingsTimeout > 0 && !c.settingsAcked && !awaitingPreface && c.timers.settings == nil {
		c.timers.settings = time.AfterFunc(c.cfg.SettingsTimeout, c.onSettingsTimeout)
	}
	every, _, _ := c.keepaliveParams()
	prefaceBound := awaitingPreface && c.cfg.PrefaceTimeout > 0
	switch {
	case prefaceBound && every > 0:
		// Until the client greets, the keepalive timer bounds the wait
		// for it (onKeepalive), and prefaced moves it to keepalive
		// duty: a connection that never greets, a slowloris peer's,
		// holds one shared timer entry of 40 bytes and no runtime timer.
		c.timers.keepalive = afterFuncShared(c.cfg.PrefaceTimeout, c, c.cfg.inBubble)
	case prefaceBound:
		// Not kept to be stopped: Conn has no room for it (TestConnSize),
		// and once the preface came it finds statePrefaced and does
		// nothing. It holds the connection weakly: a connection that
		// ends before the timer fires must not stay reachable from the
		// runtime's timers with all it holds until then (a client that
		// reconnects hundreds of times a second, as rapid reset's does,
		// made the server hold every connection of the last
		// PrefaceTimeout). While it lives the server's connection set
		// holds it.
		wc := weak.Make(c)
		time.AfterFunc(c.cfg.PrefaceTimeout, func() {
			if c := wc.Value(); c != nil {
				c.onPrefaceTimeout()
			}
		})
	case every > 0:
		c.timers.keepalive = afterFuncShared(every, c, c.cfg.inBubble)
	}
	if c.role == RoleServer && (c.cfg.MaxConnectionIdle > 0 || c.cfg.MaxConnectionAge > 0) {
		a := &ageTimers{idleSince: timeNow()}
		c.timers.age = a
		if c.cfg.MaxConnectionIdle > 0 {
			a.idle = time.AfterFunc(c.cfg.MaxConnectionIdle, c.onIdleTimer)
		}
		if c.cfg.MaxConnectionAge > 0 {
			a.age = time.AfterFunc(c.cfg.MaxConnectionAge, c.onMaxAge)
		}
	}
}

func (c *Conn) stopTimersLocked() {
	if c.timers.keepalive != nil {
		c.timers.keepalive.Stop()
	}
	timers := [...]*time.Timer{c.timers.settings, nil, nil}
	if r := c.rare; r != nil {
		timers[1], timers[2] = r.shutdown, r.drain
	}
	for _, t := range timers {
		if t != nil {
			t.Stop()
		}
	}
	if a := c.timers.age; a != nil {
		for _, t := range [...]*time.Timer{a.idle, a.age, a.grace} {
			if t != nil {
				t.Stop()
			}
		}
	}
}

func (c *Conn) onSettingsTimeout() {
	c.mu.Lock()
	acked := c.settingsAcked || c.closing
	c.mu.Unlock()
	if !acked {
		c.fail(connErr(h2frame.ErrCodeSettingsTimeout, "settings_ack_timeout"))
	}
}

// onPrefaceTimeout ends a server connection whose client did not send its
// preface and first SETTINGS within PrefaceTimeout (a stalled handshake).
// prefacedLocked starts what waited for the client's greeting on a
// server: the SETTINGS ACK's deadline, and keepalive on the timer that
// bounded the wait (startTimersLocked).
func (c *Conn) prefacedLocked() {
	if c.closing {
		return
	}
	if c.cfg.SettingsTimeout > 0 && !c.settingsAcked && c.timers.settings == nil {
		c.timers.settings = time.AfterFunc(c.cfg.SettingsTimeout, c.onSettingsTimeout)
	}
	if every, _, _ := c.keepaliveParams(); every > 0 && c.timers.keepalive != nil {
		c.timers.keepalive.Reset(every)
	}
}

func (c *Conn) onPrefaceTimeout() {
	if c.state.Load()&(statePrefaced|stateEnded) == 0 {
		c.fail(connErr(h2frame.ErrCodeProtocol, "preface_timeout"))
	}
}

// onKeepalive pings once Time passed since the last frame read (grpc-go's
// rule) and closes the connection when nothing at all was read within
// Timeout after the PING.
func (c *Conn) onKeepalive() {
	if c.role == RoleServer && c.state.Load()&statePrefaced == 0 {
		// The timer bounds the wait for the client's greeting until it
		// comes (startTimersLocked).
		c.onPrefaceTimeout()
		return
	}
	every, timeout, withoutStreams := c.keepaliveParams()
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	now := timeNow()
	last := c.lastRead.Load()
	if c.timers.kaWaiting {
		if last < c.timers.kaSentAt {
			c.mu.Unlock()
			// The peer went silent: nothing is sent to it.
			c.fail(&Error{Code: h2frame.ErrCodeNo, Initiator: InitiatorPeer, Reason: "keepalive_timeout"})
			return
		}
		c.timers.kaWaiting = false
		c.timers.kaPingOut = false
	}
	if idle := now.Sub(time.Unix(0, last)); idle < every {
		c.timers.keepalive.Reset(every - idle)
		c.mu.Unlock()
		return
	}
	if c.numLocal+c.numPeer == 0 && !withoutStreams {
		c.timers.keepalive.Reset(every)
		c.mu.Unlock()
		return
	}
	c.timers.kaPingOut = true
	c.timers.kaWaiting = true
	c.timers.kaSentAt = now.UnixNano()
	c.queueCtrlLocked(ctrlFrame{kind: ctrlPing, data: keepalivePingData}, false)
	c.ensureWriterLocked()
	c.timers.keepalive.Reset(timeout)
	c.mu.Unlock()
}

// onIdleTimer sends a graceful GOAWAY when the connection had no stream for
// MaxConnectionIdle.
func (c *Conn) onIdleTimer() {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	if c.numLocal+c.numPeer == 0 {
		if left := c.cfg.MaxConnectionIdle - timeNow().Sub(c.timers.age.idleSince); left > 0 {
			c.timers.age.idle.Reset(left)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.GracefulShutdown()
		return
	}
	c.timers.age.idle.Reset(c.cfg.MaxConnectionIdle)
	c.mu.Unlock()
}

// onMaxAge starts a graceful shutdown, then closes hard after the grace.
func (c *Conn) onMaxAge() {
	c.GracefulShutdown()
	if c.cfg.MaxConnectionAgeGrace > 0 {
		c.mu.Lock()
		if !c.closing {
			c.timers.age.grace = time.AfterFunc(c.cfg.MaxConnectionAgeGrace, func() {
				c.fail(&Error{Code: h2frame.ErrCodeNo, Initiator: InitiatorUser, Reason: "max_connection_age"})
			})
		}
		c.mu.Unlock()
	}
}
