package h2conn

import (
	"io"

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
// Order: a registration is made while the receive queue holds less than
// the range, at the offset where the queued bytes end; the sinkLead buffers
// queued then precede every landed byte. The registration ends
// (endSinkLocked) as soon as a DATA byte of the stream goes to the queue
// instead, so every landed byte precedes the buffers queued after it.
// RecvInto hands out the lead buffers, then reports landed bytes, then
// hands out the rest of the queue.
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
	c.mu.Lock()
	s := c.streams[id]
	if s == nil || s.sink == nil || s.err != nil || s.recvEOF {
		c.mu.Unlock()
		return nil, nil
	}
	k := min(n, s.sinkEnd-s.sinkOff)
	if k <= 0 {
		c.mu.Unlock()
		return nil, nil
	}
	b := s.sink
	b.Ref() // the landing's reference: DataFrame.Sink, freed by onData
	dst := b.Bytes()[s.sinkOff : s.sinkOff+k]
	s.sinkOff += k // reserved; a refused frame fails the stream
	c.mu.Unlock()
	return b, dst
}

// deliverLocked hands the data of an accepted DATA frame to s: what landed
// in the registered buffer is counted for RecvInto, and b (the rest; takes
// ownership) joins the receive queue, which ends the registration. The
// registration also ends when its range is full or the stream's data ends.
func (c *Conn) deliverLocked(s *Stream, f *h2frame.DataFrame, b *bufpool.Buffer, end bool) {
	if f.Landed > 0 && f.Sink == s.sink {
		// f.Sink is s.sink only while the registration DataDest used
		// lives: it ends only here or when the stream fails (and a
		// failed stream refuses the frame before this).
		s.sinkGot += int(f.Landed)
	} else if f.Landed > 0 {
		s.creditLocked(int(f.Landed)) // the receiver gave up: dropped, as consumed
	}
	if b != nil {
		if b.Len() == 0 {
			b.Free() // empty payload: nothing to deliver
		} else {
			s.recvQ.push(b) // the stream's receive queue now owns b; Recv hands it on
			s.endSinkLocked()
		}
	}
	if s.sink != nil && (end || s.sinkOff >= s.sinkEnd) {
		s.endSinkLocked()
	}
}

// endSinkLocked ends s's registration, dropping its reference. Bytes that
// landed and were not yet reported stay counted in sinkGot.
func (s *Stream) endSinkLocked() {
	if s.sink != nil {
		s.sink.Free() // the registration's reference, taken by recvInto
		s.sink = nil
	}
	s.sinkOff, s.sinkEnd = 0, 0
}

// dropSinkLocked ends the registration and forgets landed bytes nobody will
// read (the stream failed, or the receiver gave up).
func (s *Stream) dropSinkLocked() {
	s.endSinkLocked()
	s.sinkGot, s.sinkLead = 0, 0
}

// RecvInto is Recv for a receiver gathering a message into dst, whose
// bytes [from, to) are still to come: it borrows dst until return (the
// stream takes a reference of its own while it lands bytes there). It
// returns, in the stream's byte order, either a queued payload b (an owned
// buffer, as Recv returns) or n > 0: the next n bytes landed in
// dst.Bytes()[from:from+n]. Once dst is registered, DATA arriving while the
// receiver is busy lands there too, and the next call reports it. Errors
// and io.EOF are Recv's.
func (s *Stream) RecvInto(dst *bufpool.Buffer, from, to int) (b *bufpool.Buffer, n int, err error) {
	c := s.conn
	c.mu.Lock()
	for {
		if s.sinkLead > 0 {
			s.sinkLead--
			b := s.recvQ.pop() // lead buffers stay queued until handed out
			// b leaves the receive queue: the caller owns it now.
			s.creditLocked(b.Len())
			c.mu.Unlock()
			return b, 0, nil
		}
		if n := s.sinkGot; n > 0 {
			s.sinkGot = 0
			s.creditLocked(n)
			c.mu.Unlock()
			return nil, n, nil
		}
		if s.sink == nil && !s.recvEOF && s.err == nil && s.state.canRecv() &&
			0 <= from && from+s.recvQ.bytes < to && to <= dst.Len() {
			// Register at the end of what is queued (all of it belongs
			// to the range, which it does not fill).
			dst.Ref() // the registration's reference, dropped by endSinkLocked
			s.sink, s.sinkOff, s.sinkEnd = dst, from+s.recvQ.bytes, to
			s.sinkLead = s.recvQ.len()
			continue
		}
		if b := s.recvQ.pop(); b != nil {
			// b leaves the receive queue: the caller owns it now.
			s.creditLocked(b.Len())
			c.mu.Unlock()
			return b, 0, nil
		}
		if s.recvEOF {
			c.mu.Unlock()
			return nil, 0, io.EOF
		}
		if s.err != nil {
			err := s.err
			c.mu.Unlock()
			return nil, 0, err
		}
		s.recvWaiting = true
		c.mu.Unlock()
		<-s.recvCh
		c.mu.Lock()
		s.recvWaiting = false
	}
}

// creditLocked gives n consumed bytes back to the stream's receive window.
func (s *Stream) creditLocked(n int) {
	c := s.conn
	if s.recvEOF || s.err != nil {
		return
	}
	if inc := s.in.credit(n, c.streamWindow); inc > 0 {
		c.queueCtrlLocked(ctrlFrame{kind: ctrlWindowUpdate, id: s.id, val: inc}, false)
		c.flushLocked()
	}
}
