package h2conn

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/leangrpc/leangrpc/internal/budget"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// Stream is one HTTP/2 stream. Its mutable fields are guarded by conn.mu,
// except its receive side, which rmu guards (below); a stream's sender and
// receiver goroutines wait on their own one-slot channel, which every
// change that concerns them signals.
//
// The receive side. rmu guards recvQ, recvWaiting and in: every access
// holds it. recvEOF, err, gotHeaders, trailersOnly, hdrs and trls on a
// client, trls, and their wire lengths change only with both conn.mu and
// rmu held, so holding either is enough to read them. The lock order is
// conn.mu, then rmu; nothing takes conn.mu holding rmu. So the receiver
// takes what is queued for it, and its answer's headers and trailers,
// under its stream's lock alone: a receiver the reader woke does not
// queue on the engine lock behind the reader's next read, nor behind the
// senders of other streams.
type Stream struct {
	id    uint32
	conn  *Conn
	local bool // we initiated it

	state streamState
	out   outflow // send window

	rmu sync.Mutex // the receive side (above)
	in  inflow     // receive window; rmu

	slot sendSlot // the send side (sendslot.go)

	inReady bool // linked in conn.ready
	next    *Stream

	recvQ bufQueue // owned buffers, handed out by Recv
	// The registration RecvInto makes (sink.go): data lands in
	// sink.Bytes()[sinkOff:sinkEnd]; sinkGot bytes landed and are not yet
	// reported to the receiver.
	sink     *bufpool.Buffer // one reference owned by the stream; nil: no registration
	sinkOff  int             // next landing offset, reserved by DataDest
	sinkEnd  int
	sinkGot  int
	sinkLazy bool            // registered without a buffer: DataDest takes one of sinkEnd bytes
	sinkHand *bufpool.Buffer // the receiver's reference on a buffer DataDest took, until RecvInto hands it over
	// sinkAny says a registration or what it landed is still there
	// (noteSink), for Recv, which then takes conn.mu to drop it. Only the
	// receiver's own RecvInto makes it true.
	sinkAny atomic.Bool
	recvEOF bool // the peer ended the stream; Recv returns io.EOF once recvQ is empty
	// eofSeen is set by the receiver, under mu, once Recv found recvEOF
	// with recvQ empty: from then on Recv returns io.EOF and Trailers the
	// final trailers without taking mu (neither can change after the
	// peer's END_STREAM), sparing a unary call engine-lock round trips
	// (lockcount_test.go counts what a call takes).
	eofSeen      atomic.Bool
	recvWaiting  bool
	unary        bool          // opened as StreamOptions.Unary: its caller waits for the response right after the request (flushWaitLocked)
	inlineH      InlineHandler // RunInline's handler, while pending (Conn.inline)
	gotHeaders   bool          // client: response headers arrived
	trailersOnly bool          // client: the response headers ended the stream

	hdrs []hpack.HeaderField // request (server) or response (client) headers
	trls []hpack.HeaderField
	// The payload lengths of the HEADERS frames that carried hdrs and trls
	// (CONTINUATIONs not counted), what grpc-go's stats handlers get as
	// InHeader's and InTrailer's WireLength.
	hdrsWire, trlsWire uint32

	contentLength int64 // -1: none declared
	recvBytes     int64

	err      *Error       // why the stream ended abnormally
	resetObj ResetHandler // SetResetHandler's
	hookDone bool
	// arrival is SetHandlers' arrival handler, until the request's first DATA
	// or END_STREAM or the stream's end; arrivalReset says the reset hook
	// is due before it at the end (endAwaited).
	arrival      ArrivalHandler
	arrivalReset bool
	done         chan struct{} // made on first Done call
	doneFired    bool

	recvCh chan struct{} // one slot; signals the receiver
	sendCh chan struct{} // one slot; signals the sender
	// cancel, when set (StreamOptions.WatchCanceled), ends a wait of the
	// stream's sender or receiver once closed, resetting the stream with
	// CANCEL.
	cancel <-chan struct{}
	// canceling (StreamOptions.Canceled without WatchCanceled) is a
	// channel whose close means the stream is about to be reset; only
	// looked at, without waiting on it.
	canceling <-chan struct{}
}

// waitRecvLocked parks the receiver until the reader signals s (or the
// stream is canceled). Called with mu and rmu held, after the receiver
// found nothing to take under both; returns with neither held, and the
// receiver looks again (recvReadyRx), under rmu alone when it was woken.
// Marking recvWaiting under mu is what keeps the reader from offering its
// role while a receiver waits (mayOfferLocked): a receiver either sees the
// offer here or is counted in Conn.parked before the reader decides.
func (s *Stream) waitRecvLocked() {
	c := s.conn
	if c.roleState().offered() && !s.canceled() && c.takeOffered(roleTaken) {
		// The reader offered its role (reader.go): read for ourselves,
		// under this hold when the next frame is already here.
		s.rmu.Unlock()
		if c.src != nil && c.nextFrameWhole() {
			c.src.batchHeld = true
		} else {
			c.mu.Unlock()
		}
		c.readAsCaller() // returns with mu held
		c.mu.Unlock()
		return
	}
	if !s.recvWaiting { // a stale signal may have left it set (recvReadyRx)
		s.recvWaiting = true
		c.parked.Add(1)
	}
	done := s.cancel
	s.rmu.Unlock()
	c.mu.Unlock()
	s.park(s.recvCh, done)
}

// canceled reports whether StreamOptions.Canceled's channel is
// closed; called under mu.
func (s *Stream) canceled() bool {
	return isClosed(s.cancel) || isClosed(s.canceling)
}

// isClosed reports whether ch is closed (false for nil).
func isClosed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// park blocks until ch is signaled or the cancel channel done (s.cancel
// read under mu) is closed, in which case it resets the stream with
// CANCEL. Called without mu.
func (s *Stream) park(ch chan struct{}, done <-chan struct{}) {
	if done == nil {
		<-ch
		return
	}
	select {
	case <-ch:
	case <-done:
		s.Reset(h2frame.ErrCodeCancel)
	}
}

// maxFreeStreams bounds the released Stream objects a busy connection keeps
// for reuse: enough for grpc-go's benchmark concurrency (120 calls in
// flight) to open streams without allocating. A connection whose reader
// waits in OnReadable when idle drops the list as it goes idle
// (trimIdleLocked). One that cannot, and so never knows it is idle, cuts
// the list to idleFreeStreams whenever no stream is open; the streams cut
// go to spareStreams, a process-wide sync.Pool, since a busy connection
// often has no stream open for a moment (a server that answered every
// request of a batch) and takes them back a moment later, and the garbage
// collector empties the pool of a process that stays idle. (Cutting at
// those moments on every connection made one stream in six a new
// allocation at 120 calls in flight: the pool's per-processor lists often
// miss.) The free
// list is per connection first so that a stream's reuse touches only its
// connection's state. A connection made in a testing/synctest bubble keeps
// out of the pool (Config.inBubble): its streams' channels belong to the
// bubble and must not cross into another, nor the pool's into it.
const (
	maxFreeStreams  = 128
	idleFreeStreams = 8
	// maxKeptFields bounds the field slices a reused stream keeps.
	maxKeptFields = 16
)

// spareStreams holds released Stream objects that a connection's free list
// had no room for (see maxFreeStreams).
var spareStreams sync.Pool

// newStreamLocked takes a released stream object, or a new one, and
// registers it.
func (c *Conn) newStreamLocked(id uint32, local bool) *Stream {
	var s *Stream
	if n := len(c.freeStreams); n > 0 {
		s = c.freeStreams[n-1]
		c.freeStreams[n-1] = nil
		c.freeStreams = c.freeStreams[:n-1]
	} else if !c.cfg.inBubble {
		s, _ = spareStreams.Get().(*Stream)
	}
	if s == nil {
		s = &Stream{recvCh: make(chan struct{}, 1), sendCh: make(chan struct{}, 1)}
	}
	s.id, s.conn, s.local = id, c, local
	s.state = stateIdle
	s.out.n = int64(c.peer.initialWindowSize)
	w := c.streamWindow.Load()
	if !c.settingsAcked && w < h2frame.DefaultInitialWindow {
		// Until the peer acknowledges our SETTINGS it may use the default
		// window (RFC 9113 §6.5.3); the difference is taken back on the ACK.
		w = h2frame.DefaultInitialWindow
	}
	s.in.init(w)
	s.contentLength = -1
	if c.streams == nil {
		c.streams = make(map[uint32]*Stream)
	}
	c.streams[id] = s
	if local {
		c.numLocal++
	} else {
		c.numPeer++
	}
	return s
}

// signalRecv wakes the stream's parked receiver, which from now on no
// longer counts as waiting for frames (Conn.parked): the reader may offer
// its role at the end of the batch that woke it (reader.go). Called with
// rmu held.
func (s *Stream) signalRecv() {
	if s.recvWaiting {
		s.recvWaiting = false
		s.conn.parked.Add(-1)
		select {
		case s.recvCh <- struct{}{}:
		default:
		}
	}
}

// signalSend wakes the goroutine parked for the stream's send slot.
func (s *Stream) signalSend() {
	if s.slot.parked {
		select {
		case s.sendCh <- struct{}{}:
		default:
		}
	}
}

// bufQueue is a FIFO of owned buffers. Its bytes are charged to the
// connection's ledger (l, nil on a client) while queued.
type bufQueue struct {
	q     []*bufpool.Buffer
	head  int
	bytes int // queued bytes
}

func (q *bufQueue) push(b *bufpool.Buffer, l *budget.Ledger) {
	q.q = append(q.q, b)
	q.bytes += b.Len()
	l.Charge(int64(b.Len()))
}

// len reports how many buffers are queued.
func (q *bufQueue) len() int { return len(q.q) - q.head }

func (q *bufQueue) pop(l *budget.Ledger) *bufpool.Buffer {
	if q.head == len(q.q) {
		return nil
	}
	b := q.q[q.head]
	q.q[q.head] = nil
	q.head++
	q.bytes -= b.Len()
	l.Release(int64(b.Len()))
	if q.head == len(q.q) {
		q.q, q.head = q.q[:0], 0
	}
	return b
}

// freeAll frees every queued buffer (each is owned by the queue).
func (q *bufQueue) freeAll(l *budget.Ledger) {
	for b := q.pop(l); b != nil; b = q.pop(l) {
		b.Free()
	}
}

// setStateLocked moves s to st, doing the bookkeeping of the new state.
func (c *Conn) setStateLocked(s *Stream, st streamState) {
	old := s.state
	if old == st {
		return
	}
	s.state = st
	if st == stateClosed {
		c.streamClosedLocked(s)
		return
	}
	if c.role == RoleServer && old == stateOpen && st == stateHalfClosedLocal && s.err == nil {
		// The response is complete before the request: tell the client
		// to stop sending with RST_STREAM(NO_ERROR) (RFC 9113 §8.1).
		c.queueCtrlLocked(ctrlFrame{kind: ctrlRST, id: s.id, code: h2frame.ErrCodeNo}, false)
		s.dropSinkLocked()
		s.rmu.Lock()
		s.recvQ.freeAll(c.ledger())
		s.err = &Error{Code: h2frame.ErrCodeNo, StreamID: s.id, Initiator: InitiatorEngine, Reason: "response_complete"}
		s.rmu.Unlock()
		s.state = stateClosed
		c.streamClosedLocked(s)
		s.rmu.Lock()
		s.signalRecv()
		s.rmu.Unlock()
	}
}

// streamClosedLocked unregisters a stream that reached the closed state.
func (c *Conn) streamClosedLocked(s *Stream) {
	if c.streams[s.id] == s {
		delete(c.streams, s.id)
		if s.local {
			c.numLocal--
			c.wakeSlotLocked()
		} else {
			c.numPeer--
			c.ledger().Release(headerListBytes(s.hdrs)) // charged by onHeaders
			c.rememberClosedLocked(s.id, s.err != nil && s.err.Initiator != InitiatorPeer)
			if c.numPeer == 0 {
				// The next request needs a reader (reader.go).
				c.reclaimOfferedLocked()
			}
		}
	}
	if s.done != nil && !s.doneFired {
		close(s.done)
	}
	s.doneFired = true
	if c.numLocal+c.numPeer == 0 {
		if a := c.timers.age; a != nil {
			a.idleSince = timeNow()
		}
		c.drainedLocked()
	}
}

func (c *Conn) wakeSlotLocked() {
	if r := c.rare; r != nil && r.slotFree != nil {
		close(r.slotFree)
		r.slotFree = nil
	}
}

// failStreamLocked ends s abnormally with err. It returns the reset hook
// to call once mu is released, if any.
func (c *Conn) failStreamLocked(s *Stream, err *Error) func(error) {
	s.rmu.Lock()
	if s.err == nil {
		s.err = err
	}
	drop := err.Initiator == InitiatorUser || !s.recvEOF
	if drop {
		s.recvQ.freeAll(c.ledger()) // queued payloads nobody will read
		s.recvEOF = false
	}
	s.rmu.Unlock()
	// A failed stream keeps no item; a waiting sender, or the next Send
	// or Release, takes the failure as the item's outcome.
	s.dropSendLocked()
	if drop {
		s.dropSinkLocked()
	}
	s.endSinkLocked() // nothing lands in a failed stream
	c.setStateLocked(s, stateClosed)
	s.rmu.Lock()
	s.signalRecv()
	s.rmu.Unlock()
	s.signalSend()
	due := s.hasResetHook() && !s.hookDone && err.Initiator != InitiatorUser
	if due {
		s.hookDone = true
	}
	if s.arrival != nil {
		// The awaited request will not come: its handler is told the
		// stream ended, after the reset hook (whatever the initiator), so
		// that it finds the call's context ended.
		s.arrivalReset = due
		return s.endAwaited
	}
	if due {
		return s.resetFunc()
	}
	return nil
}

// endAwaited is failStreamLocked's hook for a stream with an arrival
// handler: the reset hook if it is due, then the arrival handler.
func (s *Stream) endAwaited(err error) {
	c := s.conn
	c.mu.Lock()
	a, reset := s.arrival, s.arrivalReset
	s.arrival, s.arrivalReset = nil, false
	c.mu.Unlock()
	if reset {
		s.resetObj.StreamReset(err)
	}
	if a != nil {
		a.RequestArrived()
	}
}

// ResetHandler is told when its stream ends abnormally (SetResetHandler).
// An interface rather than a func, so that a handler whose object already
// exists registers it without a method value per stream.
type ResetHandler interface {
	StreamReset(err error)
}

// SetResetHandler registers h, whose StreamReset is called once, without
// holding engine locks, when the stream ends abnormally by the peer's
// RST_STREAM, a local engine error or the connection's end (not by the
// local user's Reset; on a server also by the local Close of the
// connection). It runs on the reader or the closing goroutine and must not
// block. Register it before the stream can end (on a server, inside
// HandleStream); one registered after the stream already ended is called
// at once.
func (s *Stream) SetResetHandler(h ResetHandler) { s.SetHandlers(h, nil) }

// SetHandlers is SetResetHandler(h) that also, when a is not nil, makes
// the stream await its request: a's RequestArrived is then called once,
// without engine locks, on the connection's reader when the server
// stream's first DATA frame or its END_STREAM arrives, or, when the stream
// ends first (a reset by either side, the connection's end), on the
// goroutine that ended it, after h. It reports whether a was registered:
// false when the request had begun already or the stream has ended, and
// the caller goes on at once. a must not block. One round trip of the
// engine lock registers both.
//
// A server defers a unary handler this way: until the request message
// comes there is nothing for it to do, and a stream a client opens and
// resets at once (rapid reset) then costs no handler at all.
func (s *Stream) SetHandlers(h ResetHandler, a ArrivalHandler) bool {
	c := s.conn
	c.mu.Lock()
	if s.err != nil && (s.err.Initiator != InitiatorUser || c.role == RoleServer && c.closing) && !s.hookDone && s.state == stateClosed {
		s.hookDone = true
		err := s.err
		c.mu.Unlock()
		h.StreamReset(err)
		return false
	}
	s.resetObj = h
	awaits := a != nil && s.awaitRequestLocked(a)
	c.mu.Unlock()
	return awaits
}

// ArrivalHandler is told that a request's body began to arrive, or that
// its stream ended first (SetHandlers). An interface, as ResetHandler, so
// that a server's per-call object registers itself without allocating.
type ArrivalHandler interface {
	RequestArrived()
}

// awaitRequestLocked registers h as the stream's arrival handler
// (SetHandlers) unless the request had begun. Called with mu held.
func (s *Stream) awaitRequestLocked(h ArrivalHandler) bool {
	if s.local || s.recvEOF || s.recvBytes > 0 || s.err != nil || s.state == stateClosed {
		return false
	}
	s.arrival = h
	return true
}

// takeArrivalLocked returns the arrival handler to call once mu is
// released, and forgets it. Called with mu held.
func (s *Stream) takeArrivalLocked() ArrivalHandler {
	a := s.arrival
	s.arrival = nil
	return a
}

// hasResetHook reports whether a handler is registered. Called with mu
// held.
func (s *Stream) hasResetHook() bool { return s.resetObj != nil }

// resetFunc returns the registered handler as a function (a method value,
// made only when the stream ends abnormally). Called with mu held.
func (s *Stream) resetFunc() func(error) {
	if s.resetObj != nil {
		return s.resetObj.StreamReset
	}
	return nil
}

// NewStream opens a client stream by sending HEADERS with fields (which
// must include the request pseudo-headers), as opts say. When the server's
// MAX_CONCURRENT_STREAMS is reached it waits for a slot until ctx is done
// (returning ctx.Err()). It fails fast with an error matching
// ErrConnClosed when the connection is closed, and with ErrGoingAway
// (retryable: nothing was sent) after a GOAWAY. fields is borrowed until
// return. With opts.Unary, when another goroutine holds the write role,
// NewStream returns before the HEADERS are encoded (from copies), and the
// stream's message joins them (Send), so that the caller does not park for
// them.
func (c *Conn) NewStream(ctx context.Context, fields []hpack.HeaderField, opts StreamOptions) (*Stream, error) {
	if c.role != RoleClient {
		return nil, ErrWrongRole
	}
	c.mu.Lock()
	for {
		if c.closing {
			err := c.closeErr
			c.mu.Unlock()
			return nil, err
		}
		if c.goAwayRecv || c.goAwaySent || c.nextID > h2frame.MaxWindowSize {
			c.mu.Unlock()
			return nil, ErrGoingAway
		}
		if uint32(c.numLocal) < c.peer.maxConcurrentStreams {
			break
		}
		r := c.rareLocked()
		if r.slotFree == nil {
			r.slotFree = make(chan struct{})
		}
		ch := r.slotFree
		c.handOverToReader() // streams end by frames from the peer
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
	}
	if err := c.headerListFitsLocked(fields); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	s := c.newStreamLocked(c.nextID, true)
	c.nextID += 2
	s.unary = opts.Unary
	if opts.WatchCanceled {
		s.cancel = opts.Canceled
	} else {
		s.canceling = opts.Canceled
	}
	it := HeadersItem(fields, opts.EndStream)
	if opts.Unary && !opts.EndStream {
		// The message follows at once: the HEADERS may wait for it in
		// the write buffer, or, when another goroutine writes, in the
		// slot, where the message joins them (Send).
		it.Hold, it.Return = true, ReturnHandedOver
	}
	s.slot.sender = true
	s.slot.queue(it)
	c.readyLocked(s)
	if it.Return == ReturnHandedOver && c.writing && !c.closing {
		// Another goroutine holds the write role and will encode the
		// HEADERS: return rather than park until they are encoded. A
		// failure shows in the stream's next call.
		s.slot.detach()
		s.slot.sender = false
		c.mu.Unlock()
		return s, nil
	}
	if err := s.waitSendLocked(); err != nil {
		return nil, err
	}
	return s, nil
}

// Headers returns the header list that opened the stream on a server, or on
// a client the response headers once RecvHeaders returned them (nil
// before). The strings may be kept; the slice is valid until Release.
func (s *Stream) Headers() []hpack.HeaderField {
	if !s.local {
		// A server stream's list is set before HandleStream gets the
		// stream and stays until Release: no lock needed.
		return s.hdrs
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if !s.gotHeaders {
		return nil
	}
	return s.hdrs
}

// HeadersWireLength is the payload length of the HEADERS frame that carried
// the list Headers or RecvHeaders returned (without its CONTINUATIONs, as
// grpc-go reports it); zero before that list arrived.
func (s *Stream) HeadersWireLength() int {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return int(s.hdrsWire)
}

// TrailersWireLength is HeadersWireLength for the trailers; for a
// Trailers-Only response it is the length of the one HEADERS frame.
func (s *Stream) TrailersWireLength() int {
	if s.eofSeen.Load() {
		return int(s.trlsWire)
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return int(s.trlsWire)
}

// Trailers returns the trailing header list after Recv returned io.EOF, or
// nil when the stream ended without trailers. Valid until Release.
func (s *Stream) Trailers() []hpack.HeaderField {
	if s.eofSeen.Load() {
		return s.trls
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.trls
}

// RecvHeaders waits for the response HEADERS on a client stream and returns
// them, with endStream set when they ended the stream (a trailers-only
// response: the fields are the trailers, Recv returns io.EOF). Informational
// 1xx responses are skipped. It returns an error after a reset or when the
// connection ends. The slice is valid until Release.
func (s *Stream) RecvHeaders() ([]hpack.HeaderField, bool, error) {
	if !s.local {
		return nil, false, ErrWrongRole
	}
	c := s.conn
	for {
		s.rmu.Lock()
		h, end, err, ok := s.headersReadyRx()
		s.rmu.Unlock()
		if ok {
			return h, end, err
		}
		c.mu.Lock()
		s.rmu.Lock()
		if h, end, err, ok := s.headersReadyRx(); ok {
			s.rmu.Unlock()
			c.mu.Unlock()
			return h, end, err
		}
		s.waitRecvLocked()
	}
}

// headersReadyRx is RecvHeaders's look at the stream: ok reports that it
// has its answer. Called with rmu held.
func (s *Stream) headersReadyRx() ([]hpack.HeaderField, bool, error, bool) {
	s.clearStaleWaitRx()
	switch {
	case s.gotHeaders:
		return s.hdrs, s.trailersOnly, nil, true
	case s.err != nil:
		return nil, false, s.err, true
	case s.recvEOF:
		return nil, true, &Error{Code: h2frame.ErrCodeProtocol, StreamID: s.id, Initiator: InitiatorPeer, Reason: "no_response_headers"}, true
	}
	return nil, false, nil, false
}

// clearStaleWaitRx ends the wait a receiver marked (waitRecvLocked) and
// left without the reader's signal (a stale token on recvCh, or its
// cancellation): it no longer counts as parked. Called with rmu held.
func (s *Stream) clearStaleWaitRx() {
	if s.recvWaiting {
		s.recvWaiting = false
		s.conn.parked.Add(-1)
	}
}

// Recv returns an owned buffer holding the next non-empty DATA payload. It
// returns io.EOF once the peer ended the stream and every payload was
// returned, then Trailers() holds the trailers if any; or an *Error after a
// reset (carrying the RST_STREAM code and who sent it) or when the
// connection ends. Returning a payload credits the stream's receive window;
// WINDOW_UPDATE frames are batched.
//
// What is queued is taken under rmu alone; mu is taken to wait, to send a
// WINDOW_UPDATE, and to drop what a RecvInto registration left.
func (s *Stream) Recv() (*bufpool.Buffer, error) {
	if s.eofSeen.Load() {
		return nil, io.EOF
	}
	c := s.conn
	for {
		if !s.sinkAny.Load() {
			s.rmu.Lock()
			b, err, inc, ok := s.recvReadyRx()
			s.rmu.Unlock()
			if ok {
				if inc > 0 {
					c.mu.Lock()
					s.sendCreditLocked(inc)
					c.mu.Unlock()
				}
				return b, err
			}
		}
		c.mu.Lock()
		if s.sinkAny.Load() {
			// The receiver gathers no more (RecvInto's receiver gave
			// up): what landed is dropped, and given back to the window.
			s.rmu.Lock()
			inc := s.creditRx(s.sinkGot)
			s.rmu.Unlock()
			s.sendCreditLocked(inc)
			s.dropSinkLocked()
		}
		s.rmu.Lock()
		b, err, inc, ok := s.recvReadyRx()
		if ok {
			s.rmu.Unlock()
			s.sendCreditLocked(inc)
			c.mu.Unlock()
			return b, err
		}
		s.waitRecvLocked()
	}
}

// recvReadyRx is Recv's look at the stream: ok reports that it has its
// answer, a payload (whose bytes are credited to the window: inc is the
// WINDOW_UPDATE to send, if any), io.EOF or the stream's error. Called
// with rmu held.
func (s *Stream) recvReadyRx() (*bufpool.Buffer, error, uint32, bool) {
	s.clearStaleWaitRx()
	if b := s.recvQ.pop(s.conn.ledger()); b != nil {
		// b leaves the receive queue: the caller owns it now.
		inc := s.creditRx(b.Len())
		if s.recvEOF && s.recvQ.len() == 0 {
			s.eofSeen.Store(true)
		}
		return b, nil, inc, true
	}
	if s.recvEOF {
		s.eofSeen.Store(true)
		return nil, io.EOF, 0, true
	}
	if s.err != nil {
		return nil, s.err, 0, true
	}
	return nil, nil, 0, false
}

// ExpectMessage tells the engine that the reader is about to receive n more
// bytes on this stream (a whole gRPC message whose length prefix arrived):
// it widens the stream's receive window at once so the message does not
// stall on WINDOW_UPDATE round trips. n is capped by MaxExpectBytes.
func (s *Stream) ExpectMessage(n int) {
	if n <= 0 {
		return
	}
	c := s.conn
	c.mu.Lock()
	if s.err == nil && !s.recvEOF && s.state.canRecv() {
		s.rmu.Lock()
		inc := s.in.widen(int64(min(n, MaxExpectBytes)))
		s.rmu.Unlock()
		s.sendCreditLocked(inc)
	}
	c.mu.Unlock()
}

// Reset abandons the stream: it sends RST_STREAM with code (unless the
// stream is already closed), frees every queued payload, and makes pending
// and later calls fail with an *Error whose Initiator is InitiatorUser.
func (s *Stream) Reset(code h2frame.ErrCode) {
	c := s.conn
	c.mu.Lock()
	if s.state == stateClosed {
		s.dropSinkLocked()
		s.rmu.Lock()
		s.recvQ.freeAll(c.ledger()) // the user gives up on what is left
		s.recvEOF = false
		if s.err == nil {
			s.err = &Error{Code: code, StreamID: s.id, Initiator: InitiatorUser, Reason: "reset"}
		}
		s.rmu.Unlock()
		c.mu.Unlock()
		return
	}
	wasIdle := s.state == stateIdle
	err := &Error{Code: code, StreamID: s.id, Initiator: InitiatorUser, Reason: "reset"}
	hook := c.failStreamLocked(s, err) // only an arrival handler's
	if !wasIdle && !c.closing {
		c.queueCtrlLocked(ctrlFrame{kind: ctrlRST, id: s.id, code: code}, false)
		c.flushLocked()
	}
	c.mu.Unlock()
	if hook != nil {
		hook(err)
	}
}

// Done is closed once the stream is closed: both halves ended, reset by
// either side, or the connection ended.
func (s *Stream) Done() <-chan struct{} {
	c := s.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
		if s.doneFired {
			close(s.done)
		}
	}
	return s.done
}

// Err returns why the stream closed abnormally (an *Error), or nil while it
// is open or when it ended normally.
func (s *Stream) Err() error {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.err == nil || (s.err.Code == h2frame.ErrCodeNo && s.err.Reason == "response_complete") {
		return nil
	}
	return s.err
}

// Release tells the engine the caller is done with the stream so its
// object can be reused. It is optional; after it the Stream must not be
// used. An item a Send left to another writer (ReturnHandedOver) is sent
// first, or, when it ends a stream whose request has ended, left to the
// writer. Releasing a stream that is still open resets it with CANCEL.
func (s *Stream) Release() {
	c := s.conn
	if c == nil {
		return
	}
	c.mu.Lock()
	sl := &s.slot
	if sl.state == slotDetached && !sl.sender && s.err == nil {
		if sl.item.ends() && s.state == stateHalfClosedRemote {
			// The detached item (a unary response) ends the stream,
			// whose request has ended: it goes out without anyone to
			// wait for it, and the write loop recycles the stream once
			// it has. Nobody is told of the stream any more.
			sl.to(evOrphan)
			s.resetObj, s.arrival = nil, nil
			s.freeRecvQLocked()
			s.dropSinkLocked()
			c.mu.Unlock()
			return
		}
		// The detached item goes out before the stream is given up, as
		// if its Send had waited.
		sl.sender = true
		sl.attach()
		s.waitItemLocked()
		sl.sender = false
	}
	if sl.state == slotDone && !sl.sender {
		sl.collect()
	}
	if s.state != stateClosed {
		err := &Error{Code: h2frame.ErrCodeCancel, StreamID: s.id, Initiator: InitiatorUser, Reason: "released"}
		wasIdle := s.state == stateIdle
		c.failStreamLocked(s, err)
		s.arrival = nil // released: nobody awaits the request any more
		if !wasIdle && !c.closing {
			c.queueCtrlLocked(ctrlFrame{kind: ctrlRST, id: s.id, code: h2frame.ErrCodeCancel}, false)
			c.flushLocked()
		}
	}
	s.freeRecvQLocked()
	s.dropSinkLocked()
	c.recycleLocked(s)
	c.mu.Unlock()
}

// freeRecvQLocked frees what is queued for the receiver, who gave up.
func (s *Stream) freeRecvQLocked() {
	s.rmu.Lock()
	s.recvQ.freeAll(s.conn.ledger())
	s.rmu.Unlock()
}

// recycleLocked puts a released stream in the connection's free list,
// emptied, when nothing refers to it any more; otherwise it is left to the
// garbage collector.
func (c *Conn) recycleLocked(s *Stream) {
	keep := maxFreeStreams
	if c.numLocal+c.numPeer == 0 && c.resume == nil {
		// No idle trim will come (a connection that waits in
		// OnReadable, resume set, is trimmed as it goes idle): cut now.
		keep = idleFreeStreams
		if n := len(c.freeStreams); n > keep {
			if !c.cfg.inBubble {
				for _, f := range c.freeStreams[keep:] {
					spareStreams.Put(f)
				}
			}
			clear(c.freeStreams[keep:])
			c.freeStreams = c.freeStreams[:keep]
		}
	}
	reuse := !s.inReady && !s.slot.parked && !s.recvWaiting && s.slot.state == slotEmpty && !s.slot.sender &&
		!c.closing && len(c.freeStreams) < keep
	if reuse {
		hdrs, trls, q, copies := s.hdrs[:0], s.trls[:0], s.recvQ.q[:0], s.slot.copies[:0]
		if cap(copies) > maxKeptFields {
			copies = nil
		}
		clear(copies[:cap(copies)])
		if s.trailersOnly {
			trls = nil // it aliased hdrs
		}
		// Field slices of an unusually large header block are not kept.
		if cap(hdrs) > maxKeptFields {
			hdrs = nil
		}
		if cap(trls) > maxKeptFields {
			trls = nil
		}
		recvCh, sendCh := s.recvCh, s.sendCh
		select {
		case <-recvCh:
		default:
		}
		select {
		case <-sendCh:
		default:
		}
		*s = Stream{hdrs: hdrs, trls: trls, slot: sendSlot{copies: copies}, recvCh: recvCh, sendCh: sendCh}
		s.recvQ.q = q
		c.freeStreams = append(c.freeStreams, s)
	}
}
