package h2conn

import (
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// A server's wait for the client's greeting.
//
// A new server connection waits for the client's preface and first frame
// (its SETTINGS) as an idle one waits for its next frame: in the idle
// poller, with no goroutine and no read buffer, from the first byte. A
// slowloris peer that connects and sends nothing, or part of its greeting,
// then costs its socket and the Conn until PrefaceTimeout, not a parked
// goroutine and a 16 KiB read buffer each.
//
// Bytes of a greeting that came in parts are kept in readSource.greeting,
// a slice of their exact size, between the waits: the frame reader cannot
// keep them (it would hold its whole read buffer), and the socket cannot
// (the idle poller is level-triggered, so bytes left in the socket would
// wake it again at once). The greeting is at most maxGreetingWait bytes
// while it is kept there; a longer first frame, or bytes that are not a
// greeting, go to the frame reader, which parses or refuses them as usual,
// a stall inside them bounded as any stall inside a frame (stall.go).
//
// A client that sends its preface and SETTINGS in one write, as every
// HTTP/2 client does, is read at once when they are there by its accept: no
// wait, no copy; otherwise one OnReadable registration, as an idle
// connection costs.

// maxGreetingWait is the longest greeting kept between waits: the preface,
// a frame header and a SETTINGS payload of 16 settings (grpc-go sends at
// most 4, x/net 5). A longer first frame is left to the frame reader.
const maxGreetingWait = prefaceLen + h2frame.HeaderLen + 16*6

// prefaceLen is the length of the client preface (RFC 9113 §3.4).
const prefaceLen = 24

// tryReadSocket is implemented by sockio's Linux conns: a read that does
// not wait.
type tryReadSocket interface {
	TryReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error)
}

// greetingSocket reports whether the server connection can wait for its
// greeting in the idle poller, and the socket's interfaces to do it.
func (c *Conn) greetingSocket() (tryReadSocket, readableNotifier, bool) {
	if c.src == nil || c.role != RoleServer || c.cfg.inBubble {
		return nil, nil, false
	}
	ts, ok := c.nc.(tryReadSocket)
	if !ok {
		return nil, nil, false
	}
	rn, ok := c.nc.(readableNotifier)
	return ts, rn, ok
}

// greetingComplete reports whether p, the greeting's bytes so far, is
// enough for the frame reader: the preface and the whole first frame, or a
// first frame too long to keep here. Bytes that cannot begin a preface are
// badPreface.
func greetingComplete(p []byte) (complete, badPreface bool) {
	n := min(len(p), prefaceLen)
	if string(p[:n]) != h2frame.ClientPreface()[:n] {
		return false, true
	}
	if len(p) < prefaceLen+h2frame.HeaderLen {
		return false, false
	}
	h := h2frame.ReadFrameHeader(p[prefaceLen:])
	total := prefaceLen + h2frame.HeaderLen + int(h.Length)
	return len(p) >= total || total > maxGreetingWait, false
}

// awaitGreeting reads what came of the greeting without waiting. Once the
// greeting is complete it hands its bytes to the frame reader (readSource.fed)
// and serves the connection on the calling goroutine; otherwise it keeps
// what came, arms OnReadable to call it again and returns, the goroutine
// then free. Called by ServeAsync and, through resumeReader, by the idle
// poller.
func (c *Conn) awaitGreeting() {
	ts, rn, _ := c.greetingSocket()
	pool, size := c.fr.ReadBufferSpec()
	s := c.src
	wait := false // the idle poller failed: wait on this goroutine
	for {
		var b *bufpool.Buffer
		var err error
		if wait {
			b, err = s.sock.ReadReady(pool, size-len(s.greeting))
		} else {
			b, err = ts.TryReadReady(pool, size-len(s.greeting))
		}
		if err != nil {
			s.greeting = nil
			c.end(c.readError(err))
			return
		}
		if b == nil {
			if c.resume == nil {
				// Under mu: Release reads it to tell a connection that trims as
				// it goes idle.
				c.mu.Lock()
				c.resume = c.resumeReader
				c.mu.Unlock()
			}
			if rn.OnReadable(c.resume) == nil {
				return
			}
			wait = true
			continue
		}
		if len(s.greeting) == 0 {
			if done, _ := greetingComplete(b.Bytes()); done {
				s.fed = b // the frame reader's first bytes
				break
			}
		}
		// The greeting's bytes so far: kept at their size (see above),
		// read as one buffer once complete.
		g := append(s.greeting[:len(s.greeting):len(s.greeting)], b.Bytes()...)
		b.Free() // copied into g
		done, bad := greetingComplete(g)
		if bad {
			s.greeting = nil
			c.end(connErr(h2frame.ErrCodeProtocol, "bad_preface"))
			return
		}
		if !done {
			s.greeting = g
			continue
		}
		nb := pool.Get(max(size, len(g)))
		nb.SetLen(copy(nb.Bytes(), g))
		s.greeting = nil
		s.fed = nb // the frame reader's first bytes
		break
	}
	s.awaiting = false
	if perr := c.fr.ReadPreface(); perr != nil {
		c.end(c.readError(perr))
		return
	}
	c.runReader()
}
