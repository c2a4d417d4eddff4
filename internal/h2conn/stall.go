package h2conn

import (
	"sync/atomic"

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
