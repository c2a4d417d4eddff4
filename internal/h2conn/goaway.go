package h2conn

import (
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// maxStreamID is the largest stream identifier; the first GOAWAY of a
// graceful shutdown names it so that streams in flight are not refused.
const maxStreamID = 1<<31 - 1

// onGoAway handles the peer's GOAWAY: no new streams; our streams above its
// last stream id were not processed and fail as retryable; the others
// finish, and the connection closes when none is left.
func (c *Conn) onGoAway(f *h2frame.GoAwayFrame) *Error {
	c.mu.Lock()
	c.goAwayRecv = true
	c.closeGoingAwayLocked()
	c.wakeSlotLocked()
	var hooks []hookCall
	for id, s := range c.streams {
		if s.local && id > f.LastStreamID {
			err := &Error{Code: h2frame.ErrCodeRefusedStream, StreamID: id, Initiator: InitiatorPeer,
				Unprocessed: true, Reason: "goaway"}
			if h := c.failStreamLocked(s, err); h != nil {
				hooks = append(hooks, hookCall{h, err})
			}
		}
	}
	if f.Code != h2frame.ErrCodeNo {
		c.peerGoAwayCode = f.Code
		c.rareLocked().peerGoAwayDebug = string(f.Debug)
	}
	c.drainedLocked()
	c.mu.Unlock()
	for _, h := range hooks {
		h.fn(h.err)
	}
	return nil
}

// peerGoAwayErrLocked is the error that ends a connection the peer sent
// GOAWAY on.
func (c *Conn) peerGoAwayErrLocked() *Error {
	reason := "goaway"
	if r := c.rare; r != nil && r.peerGoAwayDebug != "" {
		reason = "goaway: " + r.peerGoAwayDebug
	}
	return &Error{Code: c.peerGoAwayCode, Initiator: InitiatorPeer, Reason: reason}
}

// goAway sends GOAWAY and stops accepting streams; with an error code it
// closes the connection.
func (c *Conn) goAway(code h2frame.ErrCode, debug string, who Initiator) {
	if code != h2frame.ErrCodeNo {
		c.fail(&Error{Code: code, Initiator: who, Reason: debug})
		return
	}
	c.mu.Lock()
	if c.closing || c.goAwaySent {
		c.mu.Unlock()
		return
	}
	c.goAwaySent = true
	c.goAwayLastID = c.maxPeerID
	c.rareLocked().goAwayDebug = debug
	c.shutdownPhase = 2
	c.closeGoingAwayLocked()
	c.wakeSlotLocked()
	c.queueCtrlLocked(ctrlFrame{kind: ctrlGoAway, id: c.maxPeerID, code: code}, false)
	c.ensureWriterLocked()
	c.drainedLocked()
	c.mu.Unlock()
}

// GracefulShutdown drains the connection: as a server it sends GOAWAY with
// last stream id 2^31-1 and a PING, then on the PING ACK (or after a
// timeout) a second GOAWAY with the real last stream id; as a client one
// GOAWAY. Open streams finish; the connection closes when none is left.
func (c *Conn) GracefulShutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.shutdownPhase > 0 || c.goAwaySent {
		return
	}
	c.closeGoingAwayLocked()
	c.wakeSlotLocked()
	if c.role == RoleClient {
		c.goAwaySent = true
		c.shutdownPhase = 2
		c.queueCtrlLocked(ctrlFrame{kind: ctrlGoAway, id: c.maxPeerID, code: h2frame.ErrCodeNo}, false)
		c.ensureWriterLocked()
		c.drainedLocked()
		return
	}
	// Phase one: a GOAWAY that refuses nothing, and a PING; streams the
	// client opened before it saw the GOAWAY are still accepted.
	c.shutdownPhase = 1
	c.queueCtrlLocked(ctrlFrame{kind: ctrlGoAway, id: maxStreamID, code: h2frame.ErrCodeNo}, false)
	c.queueCtrlLocked(ctrlFrame{kind: ctrlPing, data: shutdownPingData}, false)
	c.rareLocked().shutdown = time.AfterFunc(shutdownPingTimeout, c.shutdownTimeout)
	c.ensureWriterLocked()
}

func (c *Conn) shutdownTimeout() {
	c.mu.Lock()
	c.shutdownPhase2Locked()
	c.mu.Unlock()
}

// shutdownPhase2Locked sends the final GOAWAY with the real last stream id.
func (c *Conn) shutdownPhase2Locked() {
	if c.shutdownPhase != 1 || c.closing {
		return
	}
	c.shutdownPhase = 2
	c.goAwaySent = true
	c.goAwayLastID = c.maxPeerID
	c.queueCtrlLocked(ctrlFrame{kind: ctrlGoAway, id: c.maxPeerID, code: h2frame.ErrCodeNo}, false)
	c.ensureWriterLocked()
	c.drainedLocked()
}

// drainedLocked closes a connection that is going away once no stream is
// left. fail must not run under mu, hence the goroutine (once per
// connection).
func (c *Conn) drainedLocked() {
	if c.closing || c.drainStarted || c.numLocal+c.numPeer != 0 {
		return
	}
	switch {
	case c.goAwayRecv:
		// The peer that sent GOAWAY closes the connection; until it does,
		// frames behind its GOAWAY (a PING) are still answered, and
		// closing with unread bytes would reset the TCP connection under
		// our last frames. A peer that never closes is closed after
		// peerGoAwayCloseDelay.
		c.drainStarted = true
		c.rareLocked().drain = time.AfterFunc(peerGoAwayCloseDelay, c.onDrainTimeout)
	case c.shutdownPhase == 2:
		c.drainStarted = true
		go c.fail(&Error{Code: h2frame.ErrCodeNo, Initiator: InitiatorUser, Reason: "drained"})
	}
}

func (c *Conn) onDrainTimeout() {
	c.mu.Lock()
	err := c.peerGoAwayErrLocked()
	c.mu.Unlock()
	c.fail(err)
}
