package h2conn

import (
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// Landing DATA in a receiver's buffer.
//
// A receiver gathering a message that spans DATA frames (grpcwire's Parser)
// registers the message's buffer and the range still to fill with
// RecvInto. From then on the frame reader asks the engine, per DATA frame,
// where the frame's data goes (connSink.DataDest): for a stream with a
// registration the answer is the next bytes of that range, and the Reader
// writes the data there, copying what it already read and reading the rest
// from the socket straight into it. The receiver learns how many bytes
// landed from RecvInto, in order with the buffers of the receive queue.
//
// A receiver that expects a large message but has no byte of it yet may
// register no buffer, only the range's length (a nil dst): the buffer is
// taken when the first frame lands, so a stream waiting for its next
// message holds no memory, and handed to the receiver with the first
// landed bytes. That buffer is no longer than what arrived plus the stream
// window (the range ends with it): a length the peer announced costs
// memory only as the peer sends, and the receiver registers a longer
// buffer when the message goes on.
//
// Order: registering moves what is queued (less than the range) into the
// buffer first and reports it as landed, and the registration ends
// (endSinkLocked) as soon as a DATA byte of the stream goes to the queue
// instead, so every landed byte precedes every byte queued while it lives,
// and RecvInto reports landed bytes before it hands out queued buffers.
//
// Memory budget: while a registration lives, the bytes of its message up to
// sinkOff (gathered before it, moved from the queue, and reserved for
// landing) are charged to the connection's ledger, since a peer that
// announces a large message and sends it slowly makes the receiver hold
// them; endSinkLocked releases them, when the message is complete or the
// registration ends otherwise.
//
// Ownership: the registration holds its own reference on the buffer, so the
// receiver may drop its own at any time (Parser.Close); each landing holds
// another, taken by DataDest, carried by DataFrame.Sink and freed by onData
// whatever becomes of the frame, so a stream that fails while its bytes
// are being read in leaves them nothing freed to write to. The receiver
// reads a byte of the range only once RecvInto reported it, after its
// landing ended.

// connSink is the engine as the frame reader's DataSink.
type connSink Conn

// DataDest implements h2frame.DataSink.
func (cs *connSink) DataDest(id uint32, n int) (*bufpool.Buffer, []byte) {
	c := (*Conn)(cs)
	// On the reader's goroutine: it may hold mu for its read's frames
	// (readbatch.go).
	held := c.src != nil && c.src.batchHeld
	if !held {
		c.mu.Lock()
	}
	s := c.streams[id]
	if s == nil || s.err != nil || s.recvEOF || (s.sink == nil && !s.sinkLazy) {
		if !held {
			c.mu.Unlock()
		}
		return nil, nil
	}
	k := min(n, s.sinkEnd-s.sinkOff)
	if k <= 0 {
		if !held {
			c.mu.Unlock()
		}
		return nil, nil
	}
	if s.sink == nil {
		// A lazy registration: its buffer is taken now, with one
		// reference for the receiver and one for the registration, and
		// the range ends where the buffer does.
		s.sinkHand = c.cfg.Pool.Get(c.lazySizeLocked(s.sinkOff+n, s.sinkEnd))
		s.sinkEnd = s.sinkHand.Len()
		s.sink = s.sinkHand
		s.sink.Ref() // the registration's reference, dropped by endSinkLocked
		s.sinkLazy = false
	}
	s.noteSink()
	b := s.sink
	b.Ref() // the landing's reference: DataFrame.Sink, freed by onData
	dst := b.Bytes()[s.sinkOff : s.sinkOff+k]
	s.sinkOff += k              // reserved; a refused frame fails the stream
	c.ledger().Charge(int64(k)) // the message gathered so far; released by endSinkLocked
	if !held {
		c.mu.Unlock()
	}
	return b, dst
}

// lazySizeLocked is the length of the buffer taken for a range of to bytes
// of which have will have arrived: no more than the peer may send on top
// under the stream window, so that a peer announcing a long message (a
// gRPC prefix) and sending little makes the receiver hold little. The
// receiver grows its buffer if the message goes on.
func (c *Conn) lazySizeLocked(have, to int) int {
	return min(to, have+int(c.streamWindow.Load()))
}

// deliverLocked hands the data of an accepted DATA frame to s, n of its
// bytes data and the rest padding: it charges the frame to the stream's
// receive window, counts what landed in the registered buffer for
// RecvInto, and queues b (the rest; takes ownership), which ends the
// registration. The registration also ends when its range is full or the
// stream's data ends. With end, the stream's data ends here (recvEOF). It
// signals the receiver (signalRecvFrame), all in one hold of rmu. It
// reports false, having freed b and changed nothing, when the frame
// exceeds the stream's window.
func (c *Conn) deliverLocked(s *Stream, f *h2frame.DataFrame, b *bufpool.Buffer, n int, end bool, rb *readBatch) bool {
	// f.Sink is s.sink only while the registration DataDest used lives:
	// it ends only here or when the stream fails (and a failed stream
	// refuses the frame before this).
	landed := f.Landed > 0 && f.Sink == s.sink
	if b != nil && b.Len() == 0 {
		b.Free() // empty payload: nothing to deliver
		b = nil
	}
	s.rmu.Lock()
	if !s.in.take(f.FlowLen) {
		s.rmu.Unlock()
		if b != nil {
			b.Free() // frame payload refused
		}
		return false
	}
	var padInc, dropInc uint32
	if pad := int(f.FlowLen) - n; pad > 0 {
		// Padding is consumed on arrival: given back with the next update.
		padInc = s.in.credit(pad, c.streamWindow.Load())
	}
	if f.Landed > 0 && !landed {
		dropInc = s.creditRx(int(f.Landed)) // the receiver gave up: dropped, as consumed
	}
	if b != nil {
		s.recvQ.push(b, c.ledger()) // the stream's receive queue now owns b; Recv hands it on
	}
	if end {
		s.recvEOF = true
	}
	s.signalRecvFrame(rb)
	s.rmu.Unlock()
	if padInc > 0 && !end {
		c.queueCtrlLocked(ctrlFrame{kind: ctrlWindowUpdate, id: s.id, val: padInc}, false)
	}
	s.sendCreditLocked(dropInc)
	if landed {
		s.sinkGot += int(f.Landed)
	}
	if b != nil || end || s.sinkOff >= s.sinkEnd {
		s.endSinkLocked()
	} else {
		s.noteSink()
	}
	return true
}

// noteSink records in sinkAny whether a registration or what it landed is
// still there. Called with mu held, after every change to them.
func (s *Stream) noteSink() {
	s.sinkAny.Store(s.sink != nil || s.sinkLazy || s.sinkGot > 0 || s.sinkHand != nil)
}

// endSinkLocked ends s's registration, dropping its reference. Bytes that
// landed and were not yet reported stay counted in sinkGot, and a buffer
// taken for a lazy registration stays in sinkHand for the receiver.
func (s *Stream) endSinkLocked() {
	if s.sink != nil {
		s.sink.Free() // the registration's reference, taken by recvInto or DataDest
		s.sink = nil
	}
	s.conn.ledger().Release(int64(s.sinkOff)) // charged by registerLocked and DataDest
	s.sinkOff, s.sinkEnd, s.sinkLazy = 0, 0, false
	s.noteSink()
}

// dropSinkLocked ends the registration and forgets landed bytes nobody will
// read (the stream failed, or the receiver gave up).
func (s *Stream) dropSinkLocked() {
	s.endSinkLocked()
	s.sinkGot = 0
	if s.sinkHand != nil {
		s.sinkHand.Free() // the receiver's reference, never handed over
		s.sinkHand = nil
	}
	s.noteSink()
}

// RecvInto is Recv for a receiver gathering a message into dst, whose
// bytes [from, to) are still to come: it borrows dst until return (the
// stream takes a reference of its own while it lands bytes there). It
// returns, in the stream's byte order, either n > 0: the next n bytes are
// in dst.Bytes()[from:from+n], or a queued payload b with n == 0 (an owned
// buffer, as Recv returns). Once dst is registered, DATA arriving while the
// receiver is busy lands there too, and the next call reports it. Errors
// and io.EOF are Recv's; the wait ends on a watched Canceled channel as Recv's
// does.
//
// A nil dst (with from 0) registers the range without a buffer: one of to
// bytes, or fewer (what arrived plus the stream window: the range then ends
// with the buffer), is taken when data first lands, and the call reporting
// the first landed bytes returns it as b, an owned buffer the receiver
// gathers into (pass it as dst from then on; it may be shorter than to).
func (s *Stream) RecvInto(dst *bufpool.Buffer, from, to int) (b *bufpool.Buffer, n int, err error) {
	c := s.conn
	for {
		c.mu.Lock()
		s.rmu.Lock()
		s.clearStaleWaitRx()
		if n := s.sinkGot; n > 0 {
			s.sinkGot = 0
			b := s.sinkHand // nil unless DataDest took the buffer
			s.sinkHand = nil
			s.noteSink()
			inc := s.creditRx(n)
			s.rmu.Unlock()
			s.sendCreditLocked(inc)
			c.mu.Unlock()
			return b, n, nil
		}
		if s.sink == nil && !s.sinkLazy && !s.recvEOF && s.err == nil && s.state.canRecv() &&
			0 <= from && from+s.recvQ.bytes < to && (dst == nil && from == 0 || dst != nil && to <= dst.Len()) {
			return s.registerLocked(dst, from, to)
		}
		if b, err, inc, ok := s.recvReadyRx(); ok {
			s.rmu.Unlock()
			s.sendCreditLocked(inc)
			c.mu.Unlock()
			if err != nil {
				return nil, 0, err
			}
			return b, 0, nil
		}
		s.waitRecvLocked()
	}
}

// registerLocked registers [from, to) of dst for RecvInto, moving what is
// queued (less than the range) into it first, and then waits as RecvInto
// does. Called with mu and rmu held; returns with neither.
func (s *Stream) registerLocked(dst *bufpool.Buffer, from, to int) (*bufpool.Buffer, int, error) {
	c := s.conn
	q := s.recvQ.bytes
	if dst == nil && q == 0 {
		s.rmu.Unlock()
		s.sinkLazy, s.sinkOff, s.sinkEnd = true, 0, to
		s.noteSink()
		c.mu.Unlock()
		return s.RecvInto(nil, 0, 0) // waits; registers nothing more
	}
	var own *bufpool.Buffer // a buffer taken here for a nil dst; the receiver's
	if dst == nil {
		own = c.cfg.Pool.Get(c.lazySizeLocked(q, to))
		dst = own
		to = own.Len()
	}
	dst.Ref() // the registration's reference, dropped by endSinkLocked
	s.sink, s.sinkOff, s.sinkEnd = dst, from+q, to
	s.noteSink()
	// The message gathered so far is held for the peer until the range
	// is full or the registration ends (endSinkLocked).
	c.ledger().Charge(int64(from + q))
	if q == 0 {
		s.rmu.Unlock()
		c.mu.Unlock()
		return s.RecvInto(dst, 0, 0) // waits; registers nothing more
	}
	// The queued bytes come first: they move into the range here, off
	// the lock (the reader lands only past them), and count as landed.
	lead := s.recvQ.q[s.recvQ.head:]
	s.recvQ = bufQueue{q: s.recvQ.q[:0]}
	c.ledger().Release(int64(q)) // the bytes leave the queue for the receiver's buffer
	// The queue's slice is reused by later pushes, so the lead buffers
	// are copied out of it first (there are few: the range exceeds them).
	var stack [8]*bufpool.Buffer
	bufs := append(stack[:0], lead...)
	clear(lead)
	inc := s.creditRx(q)
	s.rmu.Unlock()
	s.sendCreditLocked(inc)
	c.mu.Unlock()
	p := dst.Bytes()[from:]
	for _, b := range bufs {
		p = p[copy(p, b.Bytes()):]
		b.Free() // taken off the receive queue, ours
	}
	return own, q, nil
}

// creditRx gives n consumed bytes back to the stream's receive window and
// returns the WINDOW_UPDATE increment to send (sendCreditLocked), or 0.
// Called with rmu held.
func (s *Stream) creditRx(n int) uint32 {
	if s.recvEOF || s.err != nil {
		return 0
	}
	return s.in.credit(n, s.conn.streamWindow.Load())
}

// sendCreditLocked sends a WINDOW_UPDATE of inc (creditRx's) for s, unless
// it is zero or the stream receives no more. Called with mu held.
func (s *Stream) sendCreditLocked(inc uint32) {
	if inc == 0 || s.recvEOF || s.err != nil {
		return
	}
	c := s.conn
	c.queueCtrlLocked(ctrlFrame{kind: ctrlWindowUpdate, id: s.id, val: inc}, false)
	c.flushLocked()
}
