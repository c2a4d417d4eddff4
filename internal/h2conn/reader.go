package h2conn

import (
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/sockio"
)

// The connection's reader: who reads the socket, and when.
//
// Exactly one goroutine at a time may read the socket and use the frame
// reader (Conn.fr): the holder of the read role. Usually that is a reader
// goroutine (runReader), which reads a batch of frames, dispatches them,
// and goes back to the socket; after the idle wait without a frame it
// hands the wait to the socket's OnReadable and lets its goroutine go,
// holding no memory (goIdle), and OnReadable starts a new one
// (resumeReader).
//
// A connection with at most one stream open (a lone call) spends most of
// a call's CPU handing frames from that goroutine to the one that waits
// for them: the reader wakes, reads, wakes the caller (or starts the
// handler) and goes back to the socket, where it mostly finds nothing and
// parks (PERFORMANCE.md, "Hand-offs on a raw TCP echo"). So the holder
// offers the role instead, to the goroutine that will wait for the next
// frames:
//
//   - a client's reader, after a batch that leaves at most one stream open
//     and nobody parked waiting for frames, offers the role and returns; the
//     next caller to wait for its response (Stream.waitRecvLocked) takes
//     it and reads the socket itself (readAsCaller), then offers it again;
//   - a server's reader runs a unary handler itself (Stream.RunInline) when
//     the request is complete and no other stream is open, offering the
//     role while the handler runs, and takes it back after (settleBatch);
//   - a server's reader, after a batch that leaves one stream open whose
//     handler runs on its own goroutine (a streaming call), offers the role
//     as a client's does, so that the handler reads for itself; when that
//     stream ends, the role goes back to a reader goroutine, which waits
//     for the next request (reclaimOfferedLocked);
//   - the writer of a unary call's last frames flushes them from inside a
//     wait for the answer, holding the role meanwhile (flushWaitLocked).
//
// An offered role must not stay unused: the peer may send a PING, a GOAWAY
// or a new stream while nobody reads, and a handler may run for long. One
// process-wide watcher goroutine looks every watchTick at the connections
// that offered their role (and parks while none has): a role offered for a
// whole tick goes to a new reader goroutine (lookAtOffered). A timer per
// offer would cost more than the hand-off it saves: resetting one that
// fires before the runtime's sleeping poller wakes that poller every time.
// A caller reading the socket cannot see its context end, so it reads
// under a bound of callerReadWait (the read deadline of the reader's idle
// wait, re-armed once per half bound): when no frame came by then it gives
// the role to a reader goroutine and waits as any other caller, and the
// connection pauses its offers (pauseOffersLocked).
//
// The role's state is one atomic word, Conn.readRole (a roleWord), so that
// the watcher and Close can take an offered role without the connection's
// mutex: who holds the role (its holder), whether the connection is in the
// watcher's list, whether flush-waits are off, and the watcher's epoch at
// the last change. The holders and their transitions:
//
//	roleReader         a reader goroutine holds the role, or nobody needs it:
//	                   the connection waits in OnReadable, or ended
//	roleOffered        offered: nobody reads; the next waiting caller takes it
//	roleOfferedInline  offered while the reader runs a handler inline; that
//	                   reader takes it back after
//	roleTaken          a caller reads, a flush waits for the answer, or a
//	                   reader goroutine is starting
//
//	roleReader, roleTaken -> roleOffered, roleOfferedInline  offerRoleLocked (the holder)
//	roleOffered, roleOfferedInline -> roleTaken              takeOffered (a caller, the
//	                                                         watcher, Close, a flush-wait)
//	roleOfferedInline -> roleReader                          takeOffered (the reader after
//	                                                         its inline handler)
//	roleTaken -> roleReader                                  returnRoleToReader (the
//	                                                         holder; a new reader goroutine)
const (
	roleReader        = 0
	roleOffered       = 1
	roleTaken         = 2
	roleOfferedInline = 3
	roleHolder        = 3 // the bits of the holder
	// roleWatched: the connection is in the watcher's list.
	roleWatched = 4
	// roleNoFlushWait: the server's reader no longer waits for the next
	// request from inside the flush of an inline handler's response
	// (flushWaitLocked); set once such a wait lost bytes' edge.
	roleNoFlushWait = 8
	roleSticky      = roleWatched | roleNoFlushWait // bits setRole keeps
	epochShift      = 4
	epochMask       = 1<<(32-epochShift) - 1
	watchTick       = time.Millisecond
	// callerReadWait bounds a caller's read, and so how late it sees its
	// context end: between half of it and all of it.
	callerReadWait = time.Millisecond
	// noOfferBatches is how many batches a connection reads the usual
	// way, with a reader goroutine that neither offers its role nor waits
	// from inside a flush, after such a bounded wait ran out with nothing
	// read (pauseOffersLocked). The peer answers more slowly than the bound
	// then, as on a loaded server with many connections: each offered wait
	// would end at its bound and hand the role to a new reader goroutine,
	// a timer, a wake-up, a read that finds nothing and a goroutine per
	// call for nothing. After the batches, offers resume.
	noOfferBatches = 16
)

// roleWord is a value of Conn.readRole.
type roleWord uint32

// holder is who holds the role: roleReader, roleOffered,
// roleOfferedInline or roleTaken.
func (v roleWord) holder() uint32 { return uint32(v) & roleHolder }

// offered reports whether the role is offered (either way).
func (v roleWord) offered() bool {
	h := v.holder()
	return h == roleOffered || h == roleOfferedInline
}

// watched reports whether the connection is in the watcher's list.
func (v roleWord) watched() bool { return v&roleWatched != 0 }

// noFlushWait reports whether the connection stopped flush-waiting for
// the next request after an inline handler (flushWaitLocked).
func (v roleWord) noFlushWait() bool { return v&roleNoFlushWait != 0 }

// epoch is the watcher's epoch at the last change of holder.
func (v roleWord) epoch() uint32 { return uint32(v) >> epochShift }

// roleState returns the role's state now.
func (c *Conn) roleState() roleWord { return roleWord(c.readRole.Load()) }

// Transitions of the read role.

// setRole moves the role from state from to holder to, stamped with the
// watcher's current epoch and keeping the sticky bits; false when another
// goroutine changed the state first.
func (c *Conn) setRole(from roleWord, to uint32) bool {
	next := (roleWatch.epoch.Load()&epochMask)<<epochShift | uint32(from)&roleSticky | to
	return c.readRole.CompareAndSwap(uint32(from), next)
}

// offerRoleLocked offers the read role (roleOffered or roleOfferedInline):
// the goroutine calling it, which holds the role (roleReader or
// roleTaken), must then leave the socket and the frame reader alone until
// it takes the role back. The connection goes into the watcher's list
// first. Called with mu held, so that a receiver deciding under mu whether
// to park (waitRecvLocked) sees either the offered role or the reader.
func (c *Conn) offerRoleLocked(to uint32) {
	for {
		v := c.roleState()
		if !v.watched() {
			// A watcher that drops c meanwhile clears the bit again and
			// c goes in anew.
			if c.readRole.CompareAndSwap(uint32(v), uint32(v)|roleWatched) {
				watchRole(c)
			}
			continue
		}
		if c.setRole(v, to) {
			return
		}
	}
}

// takeOffered takes an offered role for by (roleTaken, or roleReader for
// the reader taking back the role it offered to its inline handler); false
// when the role was not offered, or another goroutine took it first.
func (c *Conn) takeOffered(by uint32) bool {
	v := c.roleState()
	return v.offered() && c.setRole(v, by)
}

// returnRoleToReader moves the role from roleTaken, which its caller holds,
// to roleReader: nobody else changes the state meanwhile but the watcher,
// which only clears the watched bit.
func (c *Conn) returnRoleToReader() {
	for !c.setRole(c.roleState(), roleReader) {
	}
}

// stopFlushWaits turns flush-waits after inline handlers off for good
// (roleNoFlushWait).
func (c *Conn) stopFlushWaits() { c.readRole.Or(roleNoFlushWait) }

// handOverToReader gives an offered role to a new reader goroutine: before
// a wait that only frames from the peer can end (a window update, a stream
// slot) and that no caller reads for, when the watcher finds the role
// offered for too long, and at Close (the reader finds the closed socket
// and finishes). Nothing when the role is not offered.
func (c *Conn) handOverToReader() {
	if c.takeOffered(roleTaken) {
		c.startReader()
	}
}

// reclaimOfferedLocked gives the role to a new reader goroutine if a reader
// that left offered it to a handler reading for itself (roleOffered): a
// server whose last stream ended, which needs a reader for the next
// request.
func (c *Conn) reclaimOfferedLocked() {
	if v := c.roleState(); v.holder() == roleOffered && c.setRole(v, roleTaken) {
		c.startReader()
	}
}

// startReader starts a reader goroutine for a role its caller holds as
// roleTaken. The goroutine moves the role to roleReader once it runs, so
// that the state says roleReader only while a reader goroutine exists, or
// the connection is idle in OnReadable or ended (the idle tests rely on
// it).
func (c *Conn) startReader() { go c.runTakenReader() }

func (c *Conn) runTakenReader() {
	c.returnRoleToReader()
	c.runReader()
}

// The decisions of the lone-call path.

// mayOfferLocked reports whether the role's holder may offer it after a
// batch: the connection can go idle (its reads can be bounded, which a
// caller's read needs; one in a synctest bubble keeps its reader, as the
// process-wide watcher would cross bubbles), at most one stream is open
// and nobody is parked waiting for frames.
func (c *Conn) mayOfferLocked() bool {
	return !c.cfg.inBubble && c.readWait() > 0 && !c.closing && c.numLocal+c.numPeer <= 1 && c.parked.Load() == 0
}

// offerAfterBatchLocked reports whether the holder offers the role to the
// next waiting caller at the end of a batch: it may (mayOfferLocked), a
// goroutine will wait for the next frames (a client's next caller, with or
// without a stream open; a server's only when its one stream's handler
// reads for itself), and offers are not paused (which counts one batch of
// the pause).
func (c *Conn) offerAfterBatchLocked() bool {
	return c.mayOfferLocked() && (c.role == RoleClient || c.numPeer == 1) && !c.offersPausedLocked()
}

// runInlineLocked reports whether the reader runs st's handler (RunInline)
// itself, offering the role meanwhile: the connection is lone, st's
// request is complete and the role may be offered.
func (c *Conn) runInlineLocked(st *Stream, lone bool) bool {
	return lone && st.recvEOF && st.err == nil && c.mayOfferLocked()
}

// pauseOffersLocked pauses offers for noOfferBatches batches, after an
// offered role's bounded wait ran out with nothing read.
func (c *Conn) pauseOffersLocked() { c.noOfferLeft = noOfferBatches }

// offersPausedLocked reports whether offers are paused, counting one batch
// of the pause; for a holder of the role about to offer it.
func (c *Conn) offersPausedLocked() bool {
	if c.noOfferLeft == 0 {
		return false
	}
	c.noOfferLeft--
	return true
}

// The reader goroutine.

// runReader runs the read loop on a reader goroutine (the client's, or a
// server's resumed by OnReadable) until the connection ends or goes idle.
func (c *Conn) runReader() {
	err, parked := c.readLoop(true)
	if parked {
		return
	}
	c.end(err)
}

// readLoop reads and dispatches frames until the connection ends, and
// returns its error. With idle set and a socket that supports it, it also
// returns (nil, true) when no frame came for the idle wait after arming
// OnReadable to run runReader again, or when it offered the role: the
// caller's goroutine must then return without touching the read side.
func (c *Conn) readLoop(idle bool) (*Error, bool) {
	var rn readableNotifier
	if idle && c.src != nil {
		if rn, _ = c.nc.(readableNotifier); rn != nil {
			if c.resume == nil {
				// Under mu: Release reads it to tell a connection that trims as
				// it goes idle.
				c.mu.Lock()
				c.resume = c.resumeReader
				c.mu.Unlock()
			}
			c.setReadWait(c.idleWait())
		}
	}
	ds, _ := c.nc.(readEachSource)
	// lone: at most one stream was open after the last batch of frames.
	// Such a connection reads through ReadFrame (see afterReads); a busier
	// one through ReadEach. Until a batch says otherwise, lone.
	lone := true
	for {
		if ds != nil && !lone && c.fr.Empty() && c.src.header == nil {
			// ReadEach may park at once and give up after the idle wait:
			// hold no scratch meanwhile (ReadFrame lets it go the same
			// way before it asks for bytes).
			c.fr.ReleaseScratch()
			pool, size := c.fr.ReadBufferSpec()
			timedOut, err := ds.ReadEach(pool, size, (*connReadHandler)(c))
			switch {
			case timedOut && rn != nil:
				if c.goIdle(rn) {
					return nil, true
				}
				rn = nil
				continue
			case timedOut:
				continue
			case err != nil:
				c.flushInline()
				if cerr, ok := err.(*Error); ok {
					return cerr, false
				}
				return c.readError(err), false
			}
			// ReadEach stopped without an error: after a batch that left at
			// most one stream open (nothing buffered), or at a read that
			// ended inside a frame, which ReadFrame finishes below.
			lone = c.src.fed == nil && c.src.header == nil && c.fr.Empty()
		}
		f, err := c.fr.ReadFrame()
		if err == h2frame.ErrWouldBlock && rn != nil {
			c.flushInline()
			if c.goIdle(rn) {
				return nil, true
			}
			rn = nil
			continue
		}
		if cerr := c.handleRead(f, err, nil); cerr != nil {
			c.flushInline()
			return cerr, false
		}
		if c.fr.Buffered() < h2frame.HeaderLen {
			var done bool
			if lone, done = c.settleBatch(); done {
				return nil, true
			}
		}
	}
}

// afterReads is the reader's work once the frames of the bytes read so far
// are dispatched, before it goes back to the socket. It reports whether at
// most one stream is open; the caller then yields or offers its role
// (settleBatch).
func (c *Conn) afterReads() (lone bool) {
	c.stampRead()
	c.mu.Lock()
	lone = c.afterReadsLocked()
	c.mu.Unlock()
	return lone
}

// afterReadsLocked is afterReads' work under mu, held by the caller.
func (c *Conn) afterReadsLocked() (lone bool) {
	c.creditReadLocked()
	c.ensureWriterLocked()
	return c.numLocal+c.numPeer <= 1
}

// settleBatch is the reader's step after a batch of frames read through
// ReadFrame, before it goes back to the socket: afterReads' work, and, in
// the same hold of mu, the decision to run a pending inline handler or to
// offer the role of a lone connection; or it yields on a lone connection.
// It reports whether at most one stream is open, and done when the reader
// goroutine must return because another goroutine holds the role now.
func (c *Conn) settleBatch() (lone, done bool) {
	st, h := c.takeInline()
	c.stampRead()
	c.mu.Lock()
	lone = c.afterReadsLocked()
	inline, offer := false, false
	if h != nil {
		if inline = c.runInlineLocked(st, lone); inline {
			c.offerRoleLocked(roleOfferedInline)
		}
	} else if lone {
		if offer = c.offerAfterBatchLocked(); offer {
			c.offerRoleLocked(roleOffered)
		}
	}
	c.mu.Unlock()
	switch {
	case inline:
		h.ServeInline()
		// Back to the socket, unless the watcher, or a caller of the
		// handler's, took the role meanwhile.
		return lone, !c.takeOffered(roleReader)
	case offer:
		return lone, true
	case h != nil:
		go h.ServeInline()
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
	return lone, false
}

// stampRead records a read for keepalive: once per read rather than per
// frame, since keepalive needs no finer clock (time.Now per frame was 1.4%
// of streaming ×120's CPU).
func (c *Conn) stampRead() {
	if c.keepaliveOn {
		c.lastRead.Store(timeNow().UnixNano())
	}
}

// Parking while idle.

// The reader waits a while for a frame before it hands the wait to the
// socket's OnReadable and lets its goroutine go: minIdleReadWait on a new
// connection, doubling with every creditsPerDoubling reads that found bytes
// and with every return from idle, up to idleReadWait. A connection that
// makes one call and then idles (the usual health check or config stream)
// lets its goroutine go after a millisecond, so that a burst of new
// connections does not keep one goroutine per connection alive (each leaves
// a goroutine record and a cached stack behind in the runtime for good; at
// 200 ms a burst of 1000 connections peaked at 1000 goroutines, at 1 ms at
// about 70, handlers included). A busy one soon waits the full
// idleReadWait: it does not park between calls (an epoll registration and
// a goroutine start each time), and the wait's read deadline, re-armed
// once per half wait, stays rare (re-armed every half millisecond it cost
// the 1 MB workload a tenth of its throughput, in runtime timer updates
// that wake the netpoller).
const (
	minIdleReadWait    = time.Millisecond
	idleReadWait       = 200 * time.Millisecond
	creditsPerDoubling = 4
	maxIdleCredit      = 8 * creditsPerDoubling // 1ms<<8 is past idleReadWait
)

// idleWait is the reader's current idle wait (see minIdleReadWait).
func (c *Conn) idleWait() time.Duration {
	return min(minIdleReadWait<<(min(c.idleCredit, maxIdleCredit)/creditsPerDoubling), idleReadWait)
}

// creditIdleLocked adds n to the idle credit and applies the wait.
func (c *Conn) creditIdleLocked(n uint8) {
	if c.idleCredit < maxIdleCredit {
		c.idleCredit = min(c.idleCredit+n, maxIdleCredit)
		c.setReadWait(c.idleWait())
	}
}

// creditReadLocked credits the idle wait with a read that found bytes.
func (c *Conn) creditReadLocked() {
	if c.readWait() > 0 {
		c.creditIdleLocked(1)
	}
}

// readableNotifier is implemented by sockio.Conn on platforms with an idle
// poller.
type readableNotifier interface{ OnReadable(fn func()) error }

// goIdle hands the wait for the next bytes to OnReadable, after no frame
// came within the idle wait; the reader's goroutine must then return
// without touching the read side. false when that failed (closed, or the
// poller failed): the reader then waits itself for good.
func (c *Conn) goIdle(rn readableNotifier) bool {
	c.mu.Lock()
	c.trimIdleLocked()
	c.mu.Unlock()
	c.fr.ForgetHeaderBlocks()
	c.fr.FitHeaderTable()
	c.ledger().Trim()
	if rn.OnReadable(c.resume) == nil {
		return true
	}
	c.setReadWait(0)
	return false
}

// resumeReader is runReader run by OnReadable: the connection came back
// from idle, so it waits longer before parking next time.
func (c *Conn) resumeReader() {
	if c.src.awaiting {
		c.awaitGreeting()
		return
	}
	c.mu.Lock()
	c.creditIdleLocked(creditsPerDoubling)
	c.mu.Unlock()
	c.runReader()
}

// trimIdleLocked drops the memory a busy connection keeps for reuse: the
// reader calls it before it leaves an idle connection to OnReadable.
func (c *Conn) trimIdleLocked() {
	if c.numLocal+c.numPeer == 0 {
		clear(c.freeStreams)
		c.freeStreams = nil
		if len(c.streams) == 0 {
			c.streams = nil
		}
	}
	if len(c.ctrl) == 0 && !c.writing {
		c.fw.Encoder().FitTable() // the encoder is the write role's, and nobody holds it
		c.ctrl = nil
		if c.rare != nil {
			c.rare.localSettings = nil // no SETTINGS is queued
		}
	}
	c.dropRareLocked()
}

// The frame reader's source.

// readySocket is what sockio's Linux socket offers the reader: waits for
// bytes that hold no buffer, bounded or not.
type readySocket interface {
	io.Reader
	ReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error)
	ReadReadyWithin(pool *bufpool.Pool, size int, d time.Duration) (*bufpool.Buffer, error)
}

// readSource is the frame reader's source on a socket with pooled reads
// (Conn.src; h2frame.BufferSource): here the connection's reader decides
// how the next bytes come, which the frame reader, a parser, does not
// know. The next bytes are those of a read made elsewhere when there are
// any (fed: a ReadEach's, a flush-wait's); otherwise a wait for the socket,
// bounded by wait when it is set, after which the frame reader says
// ErrWouldBlock. With fedOnly set (a ReadEach parsing the whole frames it
// read) nothing but fed bytes come. Owned by the holder of the read role.
type readSource struct {
	sock readySocket
	full fullSocket // sock's ReadFull, when it has one; else nil
	// onProgress is progress bound once, on a server with a stall bound;
	// what full's ReadFull calls as bytes come.
	onProgress func()
	fed        *bufpool.Buffer // the next bytes, read elsewhere; owned here until taken
	wait       time.Duration   // bound of a wait for bytes; 0: for good
	fedOnly    bool
	// batchHeld: the reader holds mu across the frames of a read
	// (readbatch.go).
	batchHeld bool
	// awaiting is set while a server waits for the client's greeting, and
	// greeting holds its bytes that came in parts (greeting.go). The
	// three flags sit together so that the struct fits 128 bytes.
	awaiting bool
	greeting []byte
	// header holds the first bytes of a frame header, at their size, while
	// a server waits for the rest in the idle poller (ReadHeaderRest); the
	// next NextBuffer gives them back in front of the bytes that follow.
	header []byte
	// conn is the source's connection, and stall its watch over reads
	// inside a frame, made at the first one (stall.go).
	conn  *Conn
	stall *stallWatch
}

// errFedMidFrame is what the frame reader meets when the whole frames a
// ReadEach fed end inside a frame after all: a bug, which fails the
// connection rather than read a socket the ReadEach holds.
var errFedMidFrame = errors.New("h2conn: fed bytes end inside a frame")

func (s *readSource) NextBuffer(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	if s.header != nil {
		return s.nextAfterHeader(pool, size)
	}
	return s.nextBuffer(pool, size)
}

// nextBuffer is NextBuffer with no header's first bytes kept.
func (s *readSource) nextBuffer(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	if b := s.fed; b != nil {
		s.fed = nil
		return b, nil
	}
	if s.fedOnly {
		return nil, h2frame.ErrWouldBlock
	}
	if s.wait > 0 {
		b, err := s.sock.ReadReadyWithin(pool, size, s.wait)
		if b == nil && err == nil {
			return nil, h2frame.ErrWouldBlock
		}
		return b, err
	}
	return s.sock.ReadReady(pool, size)
}

// Read reads the rest of a frame, or a large DATA payload straight into
// its destination.
func (s *readSource) Read(p []byte) (int, error) {
	if s.fedOnly {
		return 0, errFedMidFrame
	}
	s.enterRead()
	n, err := s.sock.Read(p)
	s.leaveRead()
	return n, err
}

// ReadFull reads the rest of a frame (h2frame.FullReader): through the
// socket's ReadFull where there is one, which waits for all of it (under a
// receive low-water mark when Config.RecvLowWater is set). Each arrival
// inside it counts as progress for the stall watch (stall.go), so that a
// large frame arriving slowly but steadily is not taken for a stall.
func (s *readSource) ReadFull(p []byte) error {
	if s.fedOnly {
		return errFedMidFrame
	}
	if s.full == nil {
		_, err := io.ReadFull(s, p)
		return err
	}
	s.enterRead()
	err := s.full.ReadFull(p, s.onProgress)
	s.leaveRead()
	return err
}

// progress is the socket's ReadFull progress hook (readSource.onProgress,
// bound once): bytes of the frame came, so the read under way is a new one
// for the stall watch.
func (s *readSource) progress() {
	if w := s.stall; w != nil {
		w.reads.Add(1)
	}
}

// fullSocket is what sockio's Linux socket offers for the rest of a frame
// (sockio.Conn.ReadFull, SetLowWater).
type fullSocket interface {
	ReadFull(p []byte, progress func()) error
	SetLowWater(on bool)
}

// close frees bytes fed and never parsed, and stops the stall watch.
func (s *readSource) close() {
	if s.stall != nil {
		s.stall.stop()
	}
	if s.fed != nil {
		s.fed.Free()
		s.fed = nil
	}
	s.header = nil
}

// readWait is the bound of the reader's waits for bytes: the idle wait, a
// caller's callerReadWait, or 0 when the connection cannot go idle (no
// bounded wait on its socket, or its idle poller failed).
func (c *Conn) readWait() time.Duration {
	if c.src == nil {
		return 0
	}
	return c.src.wait
}

// setReadWait sets readWait, on a socket that can bound its waits.
func (c *Conn) setReadWait(d time.Duration) {
	if c.src != nil {
		c.src.wait = d
	}
}

// A caller waiting for its own answer.

// readAsCaller reads and dispatches one batch of frames on the goroutine
// of a caller that took the offered role (waitRecvLocked), then offers the
// role again, or starts a reader goroutine when the connection is no
// longer lone or the read gave up at its bound (callerReadWait), pausing
// offers then. Called without mu, or holding it with src.batchHeld set
// when the next frame is already whole (nextFrameWhole), so that the
// batch's first frames use that hold; returns with it held, since the
// caller goes on under it (one round trip fewer per call).
func (c *Conn) readAsCaller() {
	c.setReadWait(callerReadWait)
	// The frames that came in one read take mu once (readbatch.go): the
	// hold lasts while the next frame is whole in the read buffer, so
	// that no read of the socket happens under it.
	var batch readBatch
	var rb *readBatch
	if c.src != nil {
		rb = &batch
	}
	for {
		if rb != nil && c.src.batchHeld && !c.nextFrameWhole() {
			c.endBatch(rb)
		}
		f, err := c.fr.ReadFrame()
		if err == h2frame.ErrWouldBlock {
			c.endBatch(rb)
			c.flushInline()
			c.setReadWait(c.idleWait())
			c.mu.Lock()
			c.pauseOffersLocked()
			c.startReader()
			return
		}
		if cerr := c.handleRead(f, err, rb); cerr != nil {
			c.endBatch(rb)
			c.endAsCaller(cerr)
			c.mu.Lock()
			return
		}
		if c.fr.Buffered() < h2frame.HeaderLen {
			break
		}
	}
	c.flushInline()
	c.stampRead()
	c.setReadWait(c.idleWait())
	c.lockFrame(rb)
	// The caller goes on under mu as an ordinary hold of it; the receivers
	// the frames woke are signaled now, under it (one each at most).
	if rb != nil {
		c.src.batchHeld = false
		rb.wakeAll()
	}
	c.creditReadLocked()
	c.ensureWriterLocked()
	if c.offerAfterBatchLocked() {
		c.offerRoleLocked(roleOffered)
		return
	}
	c.startReader()
}

// nextFrameWhole reports whether the frame reader's next frame is whole in
// bytes already read, in its buffer or in the fed bytes it takes next, so
// that reading it makes no system call and may happen under mu. Owned by
// the holder of the read role.
func (c *Conn) nextFrameWhole() bool {
	if c.fr.NextFrameBuffered() {
		return true
	}
	return c.src != nil && c.src.fed != nil && c.src.header == nil && c.fr.Empty() && h2frame.WholeFrames(c.src.fed.Bytes())
}

// endAsCaller ends the connection from a caller holding the read role, as
// the reader goroutine would.
func (c *Conn) endAsCaller(err *Error) {
	c.flushInline()
	c.setReadWait(c.idleWait())
	c.returnRoleToReader()
	c.end(err)
}

// A handler running inline.

// InlineHandler is what RunInline runs. An interface rather than a func
// so that the server's per-call object passes itself without allocating a
// method value on every call.
type InlineHandler interface{ ServeInline() }

// RunInline asks the connection's reader to run h itself once the frames
// of the current read are dispatched, if s's request is complete by then
// and no other stream is open; otherwise h runs on a new goroutine then.
// The server's HandleStream calls it, on the reader, for a unary method. It
// reports false when the reader cannot take h (it cannot offer its role,
// or holds another): the caller then starts its goroutine itself.
func (s *Stream) RunInline(h InlineHandler) bool {
	c := s.conn
	if c.cfg.inBubble || c.readWait() == 0 || c.inline != nil {
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

// The flush inside the wait.

// flushReadSource is implemented by sockio.Conn on Linux.
type flushReadSource interface {
	FlushReadyWithin(pool *bufpool.Pool, size int, d time.Duration, f sockio.Flusher) (b *bufpool.Buffer, ferr, err error)
	TryReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error)
}

// flushWaitKindLocked decides, for the writer about to flush the frames of
// self with the role in state v, whether to flush them from inside a wait
// for what answers them (flushAndRead), which parks without the read that
// mostly finds the socket empty after a write; and if so, how the role is
// offered back after the wait:
//
//   - on a client, when self is a unary call (StreamOptions.Unary) whose request
//     is complete, on a lone connection whose role is offered: its caller
//     is about to wait for the response and read it itself. Always safe:
//     the response comes after the wait began. Not for streaming calls,
//     whose half-close would wait for an answer the caller may not want yet.
//   - on a server, when self is the unary call whose handler the reader
//     runs (roleOfferedInline) and its response is complete: the reader is
//     about to wait for the next request. Bytes that came during the
//     handler (a second call's request) left their readiness edge before
//     this wait began, which clears it: they wait for the bound
//     (callerReadWait). When a wait that ended at its bound finds bytes at
//     once, the connection stops doing this (stopFlushWaits), so that a
//     connection with calls in parallel pays that once.
//
// Not while offers are paused, nor when a goroutine is parked waiting for
// frames or self's call is being canceled.
func (c *Conn) flushWaitKindLocked(self *Stream, v roleWord) (uint32, bool) {
	if self == nil || self.slot.pending() || c.closing || c.parked.Load() != 0 || c.noOfferLeft != 0 || self.canceled() {
		return 0, false
	}
	unaryRequestSent := self.local && self.unary && self.state == stateHalfClosedLocal
	if unaryRequestSent && v.holder() == roleOffered && c.numLocal+c.numPeer <= 1 {
		return roleOffered, true
	}
	inlineAnswerSent := !self.local && self.state == stateClosed
	if inlineAnswerSent && v.holder() == roleOfferedInline && !v.noFlushWait() && c.numPeer == 0 {
		return roleOfferedInline, true
	}
	return 0, false
}

// flushWaitLocked takes the read role for a flush-wait when
// flushWaitKindLocked says so and the socket can do one, and returns the
// socket and the way to offer the role back; nil when the writer flushes
// the usual way. Called with mu held by the holder of the write role.
func (c *Conn) flushWaitLocked(self *Stream) (flushReadSource, uint32) {
	v := c.roleState()
	kind, ok := c.flushWaitKindLocked(self, v)
	if !ok {
		return nil, 0
	}
	fs, ok := c.nc.(flushReadSource)
	if !ok || c.src == nil || !c.setRole(v, roleTaken) {
		return nil, 0
	}
	if !c.fr.Empty() || c.src.fed != nil || c.src.header != nil {
		// Bytes are buffered: the next read must go on from them, the
		// usual way.
		c.offerRoleLocked(kind)
		return nil, 0
	}
	return fs, kind
}

// flushAndRead flushes the write buffer from inside a wait for the answer
// (sockio's FlushReadyWithin), giving up the write role right after the
// flush (writeFlusher), and makes what it reads the frame reader's next
// bytes (readSource.fed); then
// it offers the read role back as kind, for the caller's receive
// (waitRecvLocked) or the inline handler's reader (settleBatch) to parse.
// A failed flush fails the connection. Called without mu by the holder of
// the write role, holding the read role (flushWaitLocked); returns with mu
// held, as the write loop goes on under it.
func (c *Conn) flushAndRead(fs flushReadSource, kind uint32) {
	pool, size := c.fr.ReadBufferSpec()
	b, ferr, rerr := fs.FlushReadyWithin(pool, size, callerReadWait, (*writeFlusher)(c))
	lost := false
	if b == nil && rerr == nil && ferr == nil && kind == roleOfferedInline {
		// The bound ended the wait: bytes there at once had lost their
		// edge (see flushWaitKindLocked).
		b, rerr = fs.TryReadReady(pool, size)
		lost = b != nil
	}
	// A read error is left to the next read, which meets it again.
	if b != nil {
		c.src.fed = b // the frame reader's next bytes
	}
	c.mu.Lock()
	switch {
	case lost:
		c.stopFlushWaits() // from now on, the usual way
	case b == nil && rerr == nil && ferr == nil:
		c.pauseOffersLocked() // the bound ran out: the answer is slower than it
	}
	if kind == roleOffered && ferr == nil && c.nextFrameWhole() {
		// A unary call's answer came in whole frames: its caller's
		// goroutine parses them now, under this hold, rather than offer
		// the role it holds and take the lock again in RecvHeaders to
		// read them. readAsCaller offers the role afterwards.
		c.src.batchHeld = true
		c.readAsCaller() // returns with mu held
		return
	}
	c.offerRoleLocked(kind)
	if ferr != nil {
		c.mu.Unlock()
		c.fail(&Error{Code: h2frame.ErrCodeNo, Initiator: InitiatorPeer, Reason: "write", Cause: ferr})
		c.mu.Lock()
	}
}

// writeFlusher is the Conn as the sockio.Flusher of flushAndRead: it
// flushes the write buffer and gives up the write role, so that writers
// that came meanwhile do not wait for the answer the flush then waits for;
// what they queued goes to a parked sender or a writer goroutine
// (ensureWriterLocked).
type writeFlusher Conn

func (f *writeFlusher) Flush() error {
	c := (*Conn)(f)
	err := c.fw.Flush()
	c.mu.Lock()
	c.writing = false
	c.idleCond.Broadcast()
	if err == nil {
		c.ensureWriterLocked()
	}
	c.mu.Unlock()
	return err
}

// The watcher of offered roles.

// roleWatch is the watcher's state.
var roleWatch roleWatcher

type roleWatcher struct {
	mu      sync.Mutex
	conns   []*Conn       // connections that offered their role since the last look; guarded by mu
	looking bool          // the watcher goroutine is looking (not parked); guarded by mu
	wake    chan struct{} // wakes a parked watcher; made with the goroutine
	start   sync.Once
	epoch   atomic.Uint32
}

// StartRoleWatcher starts the watcher goroutine now rather than at the
// first offer. It stays for the life of the process, parked while no
// connection offers its role; goroutine leak checks call this before
// taking their baseline.
func StartRoleWatcher() {
	roleWatch.start.Do(func() {
		roleWatch.wake = make(chan struct{}, 1)
		go runRoleWatch()
	})
}

// watchRole adds c to the watcher's connections, starting the watcher.
func watchRole(c *Conn) {
	StartRoleWatcher()
	w := &roleWatch
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

// runRoleWatch is the watcher goroutine.
func runRoleWatch() {
	w := &roleWatch
	for {
		<-w.wake
		for w.look() {
		}
	}
}

// look waits a tick and looks at the watched connections; false once none
// is left.
func (w *roleWatcher) look() bool {
	time.Sleep(watchTick)
	now := w.epoch.Add(1) & epochMask
	w.mu.Lock()
	defer w.mu.Unlock()
	keep := w.conns[:0]
	for _, c := range w.conns {
		if lookAtOffered(c, now) {
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

// lookAtOffered is the watcher's look at c at epoch now: a role offered for
// a whole tick (two epochs since its last change) goes to a new reader
// goroutine. It reports whether to keep watching c: not once a reader
// goroutine holds the role.
func lookAtOffered(c *Conn, now uint32) bool {
	v := c.roleState()
	if v.holder() == roleReader {
		// Stop watching, unless an offer changed the state meanwhile.
		return !c.readRole.CompareAndSwap(uint32(v), uint32(v)&^roleWatched)
	}
	if (now-v.epoch())&epochMask < 2 {
		return true // not yet a whole tick
	}
	if v.offered() && c.setRole(v, roleTaken) {
		c.startReader()
	}
	return true
}

// Reads in the socket's callback: a busy connection's reader dispatches frames from inside
// the socket's read callback.

// readEachSource is implemented by sockio.Conn on Linux: reads made from
// inside the socket's read callback (sockio.Conn.ReadEach).
type readEachSource interface {
	ReadEach(pool *bufpool.Pool, size int, d sockio.ReadHandler) (timedOut bool, err error)
}

// connReadHandler is the Conn as the sockio.ReadHandler of its reader.
type connReadHandler Conn

// ReadWait is the reader's idle wait (0 when the connection cannot go
// idle), which grows while the reader is in ReadEach (creditIdleLocked).
func (d *connReadHandler) ReadWait() time.Duration { return (*Conn)(d).readWait() }

// HandleRead dispatches the frames of one read, when it holds whole frames
// only (the usual case for small messages, and the one where a read
// drains the socket); otherwise it leaves the bytes to ReadFrame, which
// waits for the rest of the last frame, and ends the ReadEach.
func (d *connReadHandler) HandleRead(b *bufpool.Buffer) (bool, error) {
	c := (*Conn)(d)
	whole := h2frame.WholeFrames(b.Bytes())
	c.src.fed = b
	if !whole {
		return false, nil // ReadFrame takes b and reads the rest
	}
	// Whole frames: the frame reader parses them and nothing else, and
	// says ErrWouldBlock once they are parsed.
	c.src.fedOnly = true
	defer func() { c.src.fedOnly = false }()
	// The read's frames take mu once, and wake what they made runnable
	// once it is let go (readbatch.go).
	var rb readBatch
	goAway := false
	for {
		f, err := c.fr.ReadFrame()
		if err == h2frame.ErrWouldBlock {
			break
		}
		goAway = goAway || err == nil && f.Header().Type == h2frame.TypeGoAway
		if cerr := c.handleRead(f, err, &rb); cerr != nil {
			c.endBatch(&rb)
			c.flushInline()
			return false, cerr
		}
	}
	c.stampRead()
	c.lockFrame(&rb)
	lone := c.afterReadsLocked()
	c.endBatch(&rb)
	c.flushInline() // ReadEach runs nothing inline: RunInline is for lone calls
	if lone || goAway {
		if lone {
			runtime.Gosched() // as settleBatch does
		}
		// A lone call: back to ReadFrame, whose first read after the
		// yield above mostly finds the socket empty; its next batch may
		// offer the role (settleBatch). Parking here instead, without that
		// read, lowered the lone call's latency but cost it more CPU: with
		// the read gone the runtime's idle thread was woken more often and
		// the call moved between threads more (PERFORMANCE.md, "Driven
		// reads and the empty read").
		// After a GOAWAY, the peer usually closes: a close queued behind
		// these bytes shows up in ReadFrame's first read, while ReadEach
		// would park without that read until its bound (sockio's ReadEach).
		return false, nil
	}
	return true, nil
}
