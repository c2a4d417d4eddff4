package h2conn

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/sockio"
)

// Lending the read role.
//
// A connection with at most one stream open spends most of a call's CPU
// handing frames from its reader goroutine to the goroutine that waits
// for them: the reader wakes, reads, wakes the caller (or starts the
// handler) and goes back to the socket, where it mostly finds nothing and
// parks. A raw TCP echo measured the hand-offs at ~5 CPU-µs per round
// trip, a fifth of a leangrpc unary call. So such a connection lends its
// read role instead:
//
//   - a client's reader, after a batch that leaves at most one stream open
//     and nobody parked waiting for frames, lends the role and returns; the
//     next caller to wait for its response (Stream.waitRecvLocked) takes
//     it and reads the socket itself, then lends it again;
//   - a server's reader runs a unary handler itself (Stream.RunInline) when
//     the request is complete and no other stream is open, lending the
//     role for as long as the handler runs, and takes it back after;
//   - a server's reader, after a batch that leaves one stream open whose
//     handler runs on its own goroutine (a streaming call), lends the role
//     as a client's does, so that the handler reads for itself; when that
//     stream ends, the role goes back to a reader goroutine, which waits
//     for the next request (reclaimFreeLocked).
//
// A lent role must not stay unused: the peer may send a PING, a GOAWAY or
// a new stream while nobody reads, and a handler may run for long. One
// process-wide watcher goroutine looks every lendTick at the connections
// that lent their role (and parks while none has): a role lent for a
// whole tick goes to a new reader goroutine. A timer per lend would cost
// more than the hand-off it saves: resetting one that fires before the
// runtime's sleeping poller wakes that poller every time. A caller reading
// the socket cannot see its context end, so it reads under a bound of
// callerReadWait (the read deadline of the reader's idle wait, re-armed
// once per half bound): when no frame came by then it gives the role to a
// reader goroutine and waits as any other caller.
//
// The role's state is one word, Conn.lendState: in its low two bits who
// holds the role, lendReader (a reader goroutine, or nobody needs it: the
// connection is idle in OnReadable, or ended), lendFree (lent, nobody
// reads), lendInline (lent, nobody reads, by a reader running a handler,
// which takes it back after) or lendCaller (taken: a caller reads, or a
// reader goroutine is starting, startReader); lendWatched when the
// connection is in the watcher's list; lendNoFlushWait; above, the
// watcher's epoch at the last change.
const (
	lendReader  = 0
	lendFree    = 1
	lendCaller  = 2
	lendInline  = 3
	lendKinds   = 3
	lendWatched = 4
	// lendNoFlushWait: the server's reader no longer waits for the next
	// request from inside the flush of an inline handler's response
	// (flushReaderLocked); set once such a wait lost bytes' edge.
	lendNoFlushWait = 8
	lendSticky      = lendWatched | lendNoFlushWait // bits setLend keeps
	epochShift      = 4
	epochMask       = 1<<(32-epochShift) - 1
	lendTick        = time.Millisecond
	// callerReadWait bounds a caller's read, and so how late it sees its
	// context end: between half of it and all of it.
	callerReadWait = time.Millisecond
	// lendCoolBatches is how many batches a connection reads the usual
	// way, with a reader goroutine that neither lends its role nor waits
	// from inside a flush, after such a bounded wait ran out with nothing
	// read (coolingLocked). The peer answers more slowly than the bound
	// then, as on a loaded server with many connections: each lent wait
	// would end at its bound and hand the role to a new reader goroutine,
	// a timer, a wake-up, a read that finds nothing and a goroutine per
	// call for nothing. After the batches, lending is tried again.
	lendCoolBatches = 16
)

// coolLocked starts the cool-down after a lent role's bounded wait ran out
// with nothing read.
func (c *Conn) coolLocked() { c.lendCool = lendCoolBatches }

// coolingLocked reports whether the connection is cooling down, counting
// one batch of it; for a holder of the role about to lend it.
func (c *Conn) coolingLocked() bool {
	if c.lendCool == 0 {
		return false
	}
	c.lendCool--
	return true
}

// lendWatch is the watcher's state.
var lendWatch lendWatcher

type lendWatcher struct {
	mu      sync.Mutex
	conns   []*Conn       // connections that lent their role since the last look; guarded by mu
	looking bool          // the watcher goroutine is looking (not parked); guarded by mu
	wake    chan struct{} // wakes a parked watcher; made with the goroutine
	start   sync.Once
	epoch   atomic.Uint32
}

// StartLendWatcher starts the watcher goroutine now rather than at the
// first lend. It stays for the life of the process, parked while no
// connection lends its role; goroutine leak checks call this before
// taking their baseline.
func StartLendWatcher() {
	lendWatch.start.Do(func() {
		lendWatch.wake = make(chan struct{}, 1)
		go runLendWatch()
	})
}

// setLend sets who holds the role, stamped with the current epoch and
// keeping the watched bit, when the state is still from; false when
// another goroutine changed it first.
func (c *Conn) setLend(from, kind uint32) bool {
	to := (lendWatch.epoch.Load()&epochMask)<<epochShift | from&lendSticky | kind
	return c.lendState.CompareAndSwap(from, to)
}

// lendLocked lends the read role as kind (lendFree or lendInline): the
// goroutine calling it (which holds the role) must then leave the socket
// and the frame reader alone until it takes the role back. Called with mu
// held, so that a receiver deciding under mu whether to park
// (waitRecvLocked) sees either the lent role or the reader.
func (c *Conn) lendLocked(kind uint32) {
	for {
		v := c.lendState.Load()
		if v&lendWatched == 0 {
			// Into the watcher's list first; a watcher that drops c
			// meanwhile clears the bit again and c goes in anew.
			if c.lendState.CompareAndSwap(v, v|lendWatched) {
				watchLend(c)
			}
			continue
		}
		if c.setLend(v, kind) {
			return
		}
	}
}

// giveBack sets the role to lendReader from the holder's own state
// (lendCaller): nobody else changes the state meanwhile but the watcher,
// which only clears the watched bit.
func (c *Conn) giveBack() {
	for {
		v := c.lendState.Load()
		if c.setLend(v, lendReader) {
			return
		}
	}
}

// isLent reports whether state v is a lent role.
func isLent(v uint32) bool { return v&lendKinds == lendFree || v&lendKinds == lendInline }

// takeLent takes a lent role for kind (lendCaller, or lendReader for a
// reader goroutine); false when the role was not lent.
func (c *Conn) takeLent(kind uint32) bool {
	v := c.lendState.Load()
	return isLent(v) && c.setLend(v, kind)
}

// ensureReaderLocked starts a reader goroutine if the role is lent, before
// a wait that only frames from the peer can end (a window update, a stream
// slot) and that no caller reads for.
func (c *Conn) ensureReaderLocked() {
	if isLent(c.lendState.Load()) && c.takeLent(lendCaller) {
		c.startReader()
	}
}

// startReader starts a reader goroutine for a role its caller holds as
// lendCaller (taken, or its own). The goroutine marks the role a reader's
// once it runs, so that the state says lendReader only while a reader
// goroutine exists, or the connection is idle in OnReadable or ended
// (the idle tests rely on it).
func (c *Conn) startReader() { go c.runTakenReader() }

func (c *Conn) runTakenReader() {
	c.giveBack()
	c.runReader()
}

// reclaimFreeLocked starts a reader goroutine if the role was lent by a
// reader that left (lendFree): a server whose last stream ended.
func (c *Conn) reclaimFreeLocked() {
	v := c.lendState.Load()
	if v&lendKinds == lendFree && c.setLend(v, lendCaller) {
		c.startReader()
	}
}

// mayLendLocked reports whether the role's holder may lend it after a
// batch: the connection can go idle (its reads can be bounded, which a
// caller's read needs; one in a synctest bubble keeps its reader, as the
// process-wide watcher would cross bubbles), at most one stream is open
// and nobody is parked waiting for frames.
func (c *Conn) mayLendLocked() bool {
	return !c.cfg.inBubble && c.fr.IdleWait() > 0 && !c.closing && c.numLocal+c.numPeer <= 1 && c.parked == 0
}

// watchLend adds c to the watcher's connections, starting the watcher.
func watchLend(c *Conn) {
	StartLendWatcher()
	w := &lendWatch
	w.mu.Lock()
	w.conns = append(w.conns, c)
	if !w.looking {
		w.looking = true
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}

// runLendWatch is the watcher goroutine.
func runLendWatch() {
	w := &lendWatch
	for {
		<-w.wake
		for w.look() {
		}
	}
}

// look waits a tick and looks at the watched connections; false once none
// is left.
func (w *lendWatcher) look() bool {
	time.Sleep(lendTick)
	now := w.epoch.Add(1) & epochMask
	w.mu.Lock()
	defer w.mu.Unlock()
	keep := w.conns[:0]
	for _, c := range w.conns {
		if lookAtLent(c, now) {
			keep = append(keep, c)
		}
	}
	clear(w.conns[len(keep):])
	w.conns = keep
	if len(keep) == 0 {
		w.looking = false
		return false
	}
	return true
}

// lookAtLent is the watcher's look at c at epoch now: it reports whether
// to keep watching c.
func lookAtLent(c *Conn, now uint32) bool {
	v := c.lendState.Load()
	if v&lendKinds == lendReader {
		// Held by a reader goroutine: stop watching, unless a lend
		// changed the state meanwhile.
		return !c.lendState.CompareAndSwap(v, v&^lendWatched)
	}
	if (now-v>>epochShift)&epochMask < 2 {
		return true // not yet a whole tick
	}
	if isLent(v) && c.setLend(v, lendCaller) {
		c.startReader()
	}
	return true
}

// readAsCaller reads and dispatches one batch of frames on the goroutine
// of a caller that took the lent role (waitRecvLocked), then lends the
// role again, or starts a reader goroutine when the connection is no
// longer lone or the read gave up at its bound (callerReadWait). Called
// without mu.
func (c *Conn) readAsCaller() {
	c.fr.SetIdleWait(callerReadWait)
	for {
		f, err := c.fr.ReadFrame()
		if err == h2frame.ErrWouldBlock {
			c.flushInline()
			c.fr.SetIdleWait(c.idleWait())
			c.mu.Lock()
			c.coolLocked()
			c.mu.Unlock()
			c.startReader()
			return
		}
		if cerr := c.handleRead(f, err); cerr != nil {
			c.endAsCaller(cerr)
			return
		}
		if c.fr.Buffered() < h2frame.HeaderLen {
			break
		}
	}
	c.flushInline()
	c.stampRead()
	c.fr.SetIdleWait(c.idleWait())
	c.mu.Lock()
	c.creditReadLocked()
	c.kickLocked()
	if c.mayLendLocked() && (c.role == RoleClient || c.numPeer == 1) && !c.coolingLocked() {
		c.lendLocked(lendFree)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.startReader()
}

// endAsCaller ends the connection from a caller holding the read role, as
// the reader goroutine would.
func (c *Conn) endAsCaller(err *Error) {
	c.flushInline()
	c.fr.SetIdleWait(c.idleWait())
	c.giveBack()
	c.end(err)
}

// InlineHandler is what RunInline runs. An interface rather than a func
// so that the server's per-call object passes itself without allocating a
// method value on every call.
type InlineHandler interface{ ServeInline() }

// RunInline asks the connection's reader to run h itself once the frames
// of the current read are dispatched, if s's request is complete by then
// and no other stream is open; otherwise h runs on a new goroutine then.
// The server's HandleStream calls it, on the reader, for a unary method. It
// reports false when the reader cannot take h (it cannot lend its role,
// or holds another): the caller then starts its goroutine itself.
func (s *Stream) RunInline(h InlineHandler) bool {
	c := s.conn
	if c.cfg.inBubble || c.fr.IdleWait() == 0 || c.inline != nil {
		return false
	}
	c.inline, s.inlineH = s, h
	return true
}

// takeInline returns the pending RunInline stream and handler.
func (c *Conn) takeInline() (*Stream, InlineHandler) {
	s := c.inline
	if s == nil {
		return nil, nil
	}
	h := s.inlineH
	c.inline, s.inlineH = nil, nil
	return s, h
}

// flushInline starts the pending RunInline handler on a goroutine of its
// own; for every exit of a batch that does not run it inline.
func (c *Conn) flushInline() {
	if _, h := c.takeInline(); h != nil {
		go h.ServeInline()
	}
}

// settleBatch is the reader's step after a batch of frames read through
// ReadFrame, before it goes back to the socket: it runs a pending inline
// handler, or lends the role of a lone client, or yields on a lone
// connection (see afterReads). It reports true when the reader goroutine
// must return because another goroutine holds the role now.
func (c *Conn) settleBatch(lone bool) bool {
	if st, h := c.takeInline(); h != nil {
		c.mu.Lock()
		ok := lone && st.recvEOF && st.err == nil && c.mayLendLocked()
		if ok {
			c.lendLocked(lendInline)
		}
		c.mu.Unlock()
		if ok {
			h.ServeInline()
			return !c.takeLent(lendReader)
		}
		go h.ServeInline()
	} else if lone {
		// A client lends with or without a stream open (its next caller
		// reads); a server only to the handler of its one stream.
		c.mu.Lock()
		ok := c.mayLendLocked() && (c.role == RoleClient || c.numPeer == 1) && !c.coolingLocked()
		if ok {
			c.lendLocked(lendFree)
		}
		c.mu.Unlock()
		if ok {
			return true
		}
	}
	if lone {
		// About to go to the socket with at most one stream open: let
		// what the frames just read made runnable (the caller waiting for
		// its response, the handler of a new request) run now on this P.
		// Otherwise it waits for this read, which on a lone call mostly
		// finds the socket empty and parks, or is stolen by another P
		// after the runtime's grace for a running P, waking an idle
		// thread to do it. With more streams the reader keeps reading
		// (yielding there cost streaming ×120 a tenth of its throughput).
		runtime.Gosched()
	}
	return false
}

// flushReadSource is implemented by sockio.Conn on Linux.
type flushReadSource interface {
	FlushReadyWithin(pool *bufpool.Pool, size int, d time.Duration, f sockio.Flusher) (b *bufpool.Buffer, ferr, err error)
	TryReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error)
}

// flushReaderLocked decides, for the writer about to flush the frames of
// self, whether to flush them from inside a wait for what answers them
// (flushAndRead), which parks without the read that mostly finds the
// socket empty after a write:
//
//   - on a client, when self is a unary call (NewStreamHold) whose request
//     is complete, on a lone connection whose role is lent: its caller is
//     about to wait for the response and read it itself. Always safe: the
//     response comes after the wait began. Not for streaming calls, whose
//     CloseSend would wait for an answer the caller may not want yet.
//   - on a server, when self is the unary call whose handler the reader
//     runs (lendInline) and its response is complete: the reader is about
//     to wait for the next request. Bytes that came during the handler
//     (a second call's request) left their readiness edge before this wait
//     began, which clears it: they wait for the bound (callerReadWait).
//     When a wait that ended at its bound finds bytes at once, the
//     connection stops doing this (lendNoFlushWait), so that a connection
//     with calls in parallel pays that once.
//
// Then it takes the read role and returns the socket and the role's kind
// to lend it back as. Called with mu held by the holder of the write role.
func (c *Conn) flushReaderLocked(self *Stream) (flushReadSource, uint32) {
	if self == nil || self.sendKind != sendNone || c.closing || c.parked != 0 || c.lendCool != 0 || self.canceled() {
		return nil, 0
	}
	v := c.lendState.Load()
	var kind uint32
	switch {
	case self.local && self.unary && self.state == stateHalfClosedLocal && v&lendKinds == lendFree && c.numLocal+c.numPeer <= 1:
		kind = lendFree
	case !self.local && self.state == stateClosed && v&(lendKinds|lendNoFlushWait) == lendInline && c.numPeer == 0:
		kind = lendInline
	default:
		return nil, 0
	}
	fs, ok := c.nc.(flushReadSource)
	if !ok || !c.setLend(v, lendCaller) {
		return nil, 0
	}
	if !c.fr.Drained() {
		// Bytes of a frame are buffered: the next read must go on
		// from them, the usual way.
		c.lendLocked(kind)
		return nil, 0
	}
	return fs, kind
}

// flushAndRead flushes the write buffer from inside a wait for the answer
// (sockio's FlushReadyWithin), giving up the write role right after the
// flush (writeFlusher), and feeds what it reads to the frame reader; then
// it lends the read role back as kind, for the caller's receive
// (waitRecvLocked) or the inline handler's reader (settleBatch) to parse.
// A failed flush fails the connection. Called without mu by the holder of
// the write role, holding the read role (flushReaderLocked).
func (c *Conn) flushAndRead(fs flushReadSource, kind uint32) {
	pool, size := c.fr.ReadBufferSpec()
	b, ferr, rerr := fs.FlushReadyWithin(pool, size, callerReadWait, (*writeFlusher)(c))
	lost := false
	if b == nil && rerr == nil && ferr == nil && kind == lendInline {
		// The bound ended the wait: bytes there at once had lost their
		// edge (see flushReaderLocked).
		b, rerr = fs.TryReadReady(pool, size)
		lost = b != nil
	}
	// A read error is left to the next read, which meets it again.
	if b != nil {
		c.fr.Feed(b)
	}
	c.mu.Lock()
	switch {
	case lost:
		c.lendState.Or(lendNoFlushWait) // from now on, the usual way
	case b == nil && rerr == nil && ferr == nil:
		c.coolLocked() // the bound ran out: the answer is slower than it
	}
	c.lendLocked(kind)
	c.mu.Unlock()
	if ferr != nil {
		c.fail(&Error{Code: h2frame.ErrCodeNo, Initiator: InitiatorPeer, Reason: "write", Cause: ferr})
	}
}

// writeFlusher is the Conn as the sockio.Flusher of flushAndRead: it
// flushes the write buffer and gives up the write role, so that writers
// that came meanwhile do not wait for the answer the flush then waits for;
// what they queued goes to a parked sender or a writer goroutine
// (kickLocked).
type writeFlusher Conn

func (f *writeFlusher) Flush() error {
	c := (*Conn)(f)
	err := c.fw.Flush()
	c.mu.Lock()
	c.writing = false
	c.idleCond.Broadcast()
	if err == nil {
		c.kickLocked()
	}
	c.mu.Unlock()
	return err
}
