package h2conn

import (
	"io"
	"sync/atomic"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// A peer stalled inside a frame.
//
// Between frames the reader waits for bytes holding nothing (the idle
// machinery); inside a frame it must hold the read buffer with the part of
// the frame that came, and a goroutine blocked in the read for the rest. A
// peer that sends half a frame header or half a payload and then nothing
// would hold both for as long as it keeps the connection open, and
// keepalive does not help: it pings a connection on which nothing was read,
// and the ping's answer would sit behind the unfinished frame. So a server
// bounds how long a read inside a frame may go without a byte
// (Config.FrameStallTimeout): after that the connection ends with GOAWAY
// ENHANCE_YOUR_CALM.
//
// The bound is on progress, not on the frame's total time: a large DATA
// frame that arrives slowly but steadily over a slow link makes each read
// return something and never trips it. And it costs no timer per frame:
// each read inside a frame counts itself and marks that it is under way
// (two atomic stores); one sharedTimer per connection, made at the first
// such read and rescheduled only while reads inside frames go on, looks
// once per bound whether the same read is still under way, which means no
// byte came for between one and two bounds.

// stallWatch is a connection's watch over reads inside a frame. Its fields
// are written by the holder of the read role and read by the timer.
type stallWatch struct {
	conn  *Conn
	timer *sharedTimer  // set once, before any look
	reads atomic.Uint32 // reads inside a frame entered so far
	in    atomic.Bool   // one is under way
	armed atomic.Bool   // timer is scheduled, or about to be
	seen  uint32        // reads at the last look; owned by the timer's goroutine
}

// enterRead marks a read inside a frame as under way, arming the watch.
func (s *readSource) enterRead() {
	w := s.stall
	if w == nil {
		c := s.conn
		if c == nil || c.cfg.FrameStallTimeout <= 0 {
			return
		}
		w = &stallWatch{conn: c}
		w.timer = newSharedTimer(w, c.cfg.inBubble)
		s.stall = w
	}
	w.reads.Add(1)
	w.in.Store(true)
	if !w.armed.Load() && w.armed.CompareAndSwap(false, true) {
		w.timer.Reset(w.conn.cfg.FrameStallTimeout)
	}
}

// leaveRead marks the read inside a frame as over.
func (s *readSource) leaveRead() {
	if w := s.stall; w != nil {
		w.in.Store(false)
	}
}

// stop unschedules the watch, at the connection's end.
func (w *stallWatch) stop() { w.timer.Stop() }

// timerExpired is the watch's look, once per bound while reads inside
// frames go on: the same read under way as at the last look ends the
// connection; no read under way lets the timer go until the next one.
func (w *stallWatch) timerExpired() {
	w.armed.Store(false)
	if !w.in.Load() {
		// enterRead, after its store of in, sees armed false and
		// schedules the timer again; or this look saw in.
		return
	}
	n := w.reads.Load()
	if n == w.seen {
		go w.conn.fail(connErr(h2frame.ErrCodeEnhanceYourCalm, "stalled_in_frame"))
		return
	}
	w.seen = n
	if w.armed.CompareAndSwap(false, true) {
		w.timer.Reset(w.conn.cfg.FrameStallTimeout)
	}
}

// A peer stalled inside a frame header.
//
// A server whose reader meets the first bytes of a frame header and then
// an empty socket waits for the rest as it waits between frames: the
// frame reader lets go of its read buffer and scratch, readSource keeps
// those bytes (at most 8) in a slice of their size, and the reader goes
// idle in OnReadable (h2frame.HeaderSource). The stall watch counts the
// whole wait, parked or not, as one read inside a frame, so that a header
// never completed still ends the connection after FrameStallTimeout.
//
// Inside a payload the reader still waits holding the read buffer, on its
// goroutine (Read, ReadFull): the part of the payload that came may be up
// to the whole buffer, too much to copy aside, and it is bounded the same
// way.

// ReadHeaderRest reads the rest of a frame header (h2frame.HeaderSource).
// A server with an idle wait waits for it within that wait and, when
// nothing came, keeps begun and says ErrWouldBlock, leaving the read under
// way for the stall watch until bytes come (nextAfterHeader). Clients, and
// a reader that cannot go idle, read it as any rest of a frame.
//
// The bytes read go through a pooled buffer and are copied into p: sockio
// has no bounded wait that reads into the caller's slice. That costs a
// copy only where a read ended inside a header.
func (s *readSource) ReadHeaderRest(begun, p []byte) (int, error) {
	if s.fedOnly {
		return 0, errFedMidFrame
	}
	c := s.conn
	if s.wait <= 0 || c == nil || c.role != RoleServer || len(p) == 0 {
		return s.Read(p)
	}
	s.enterRead()
	pool, _ := c.fr.ReadBufferSpec()
	b, err := s.sock.ReadReadyWithin(pool, len(p), s.wait)
	if b == nil && err == nil {
		s.header = append([]byte(nil), begun...)
		return 0, h2frame.ErrWouldBlock
	}
	s.leaveRead()
	if err != nil {
		return 0, err
	}
	n := copy(p, b.Bytes())
	b.Free()
	return n, nil
}

// nextAfterHeader is NextBuffer while the first bytes of a frame header
// are kept (ReadHeaderRest): the next bytes with those in front, copied
// into the same buffer when it has room, else into a new one.
func (s *readSource) nextAfterHeader(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	b, err := s.nextBuffer(pool, size)
	if err == h2frame.ErrWouldBlock {
		return nil, err // still waiting: the read stays under way
	}
	s.leaveRead()
	h := s.header
	s.header = nil
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // inside a frame
		}
		return nil, err
	}
	k, got := len(h), b.Len()
	if k+got > b.Cap() {
		nb := pool.Get(max(size, k+got))
		nb.SetLen(k + copy(nb.Bytes()[k:], b.Bytes()))
		b.Free()
		b = nb
	} else {
		b.SetLen(k + got)
		p := b.Bytes()
		copy(p[k:], p[:got])
	}
	copy(b.Bytes(), h)
	return b, nil
}
