package h2conn

import (
	"runtime"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// The write path. There is no resident writer goroutine: the "write role"
// (Conn.writing) is held by whoever is encoding and flushing. A goroutine
// that queues something (a stream's sender, Recv's WINDOW_UPDATE, Reset)
// takes the role itself when it is free and writes everything queued by
// everyone: frames from all streams go out together, in as few syscalls as
// the batch allows (flat combining). The reader never takes the role, so
// it never blocks on the socket: it queues its control frames and, if
// nobody writes, hands the role to a parked sender whose stream became
// sendable or starts a short-lived writer goroutine that exits when the
// queues are empty.
//
// Flow control is pulled at send time: a stream with something in its send
// slot sits in the ready list; the writer takes from it at most what the
// stream window, the connection window and the peer's max frame size
// allow, one frame per stream per round (round-robin).

// ctrlKind is the type of a queued control frame.
type ctrlKind uint8

const (
	ctrlSettings ctrlKind = iota + 1
	ctrlSettingsAck
	ctrlPing
	ctrlPingAck
	ctrlWindowUpdate
	ctrlRST
	ctrlGoAway
	ctrl431 // HEADERS ":status 431" ending the stream, for a header list over our limit
)

// ctrlFrame is a queued control frame; small, copied by value.
type ctrlFrame struct {
	kind ctrlKind
	id   uint32 // stream, or GOAWAY's last stream id
	val  uint32 // WINDOW_UPDATE increment
	code h2frame.ErrCode
	data [8]byte // PING payload
}

var headers431 = []hpack.HeaderField{{Name: ":status", Value: "431"}}

// readyList is a FIFO of streams with something in their send slot,
// linked through Stream.next.
type readyList struct {
	head, tail *Stream
	n          int
}

func (l *readyList) push(s *Stream) {
	s.inReady = true
	s.next = nil
	if l.tail == nil {
		l.head = s
	} else {
		l.tail.next = s
	}
	l.tail = s
	l.n++
}

func (l *readyList) pop() *Stream {
	s := l.head
	if s == nil {
		return nil
	}
	l.head = s.next
	if l.head == nil {
		l.tail = nil
	}
	s.next = nil
	s.inReady = false
	l.n--
	return s
}

// readyLocked announces that s has something to send.
func (c *Conn) readyLocked(s *Stream) {
	if !s.inReady {
		c.ready.push(s)
	}
	c.wantWrite = true
}

// queueCtrlLocked queues a control frame. fromPeer marks frames the peer
// made us queue (ACKs, resets), which maxQueuedControlFrames caps.
func (c *Conn) queueCtrlLocked(f ctrlFrame, fromPeer bool) {
	if c.closing {
		return
	}
	c.ctrl = append(c.ctrl, f)
	if fromPeer {
		c.peerControl++
		c.ledger().Charge(ctrlFrameBytes)
	}
	c.wantWrite = true
}

// ensureWriterLocked makes sure queued frames get written without blocking the
// caller: it hands the write role to a parked sender or starts a writer
// goroutine. Used by the reader and by timers.
func (c *Conn) ensureWriterLocked() {
	if c.writing || c.closing || !c.wantWrite {
		return
	}
	c.writing = true
	if s := c.parkedSenderLocked(); s != nil {
		s.slot.handoff = true
		s.signalSend()
		return
	}
	go c.runWriter()
}

func (c *Conn) runWriter() {
	c.mu.Lock()
	c.writeLoop(nil)
	c.mu.Unlock()
}

// flushLocked writes queued frames on the calling goroutine when nobody
// else is writing. Only for goroutines that may block on the socket.
func (c *Conn) flushLocked() {
	if c.writing || c.closing || !c.wantWrite {
		return
	}
	c.writing = true
	c.writeLoop(nil)
}

// parkedSenderLocked returns a parked sender near the front of the ready
// list, to hand the write role to.
func (c *Conn) parkedSenderLocked() *Stream {
	i := 0
	for s := c.ready.head; s != nil && i < 8; s = s.next {
		if s.slot.parked && s.slot.state == slotQueued {
			return s
		}
		i++
	}
	return nil
}

// writeLoop runs with mu held by the holder of the write role: it encodes
// what is queued, flushes without mu, and repeats until nothing is left;
// then it releases the role. self is the calling sender's stream, if any:
// once its own item is written (at once, when self is nil) it passes the
// role to a parked sender after each flush rather than writing for
// everyone indefinitely.
func (c *Conn) writeLoop(self *Stream) {
	corks := 0
	var wb wakeBatch
	defer wb.wake() // what the exits below leave, under mu: rare
	for {
		if !c.closing {
			c.wantWrite = false
			c.heldBatch = self != nil && len(c.ctrl) == 0 && (c.heldBatch || c.fw.Buffered() == 0)
			c.applyPeerSettingsLocked()
			c.encodeCtrlLocked()
			c.encodeStreamsLocked(self, &wb)
		}
		if c.fw.Buffered() == 0 {
			break
		}
		if self != nil && self.slot.state == slotDone && self.slot.item.Hold && c.heldBatch && !c.closing {
			// SendItem.Hold: only this stream's frames are waiting, and
			// its caller writes again at once. Any later writer flushes
			// them.
			self.slot.item.Hold = false
			c.wantWrite = true
			break
		}
		if corks < maxCorkYields && !c.closing && c.numLocal+c.numPeer > 1 && c.fw.Buffered() < c.cfg.WriteBatchBytes {
			// Cork: other streams are active and their goroutines may be
			// runnable right now (woken by the reader, about to send).
			// Yield once so they can queue, and take their frames into
			// this flush: one syscall for the batch rather than one each.
			// The batch ends when a yield brings nothing new.
			corks++
			c.mu.Unlock()
			wb.wake()
			runtime.Gosched()
			c.mu.Lock()
			if c.wantWrite && !c.closing {
				continue
			}
			corks = maxCorkYields
		}
		c.heldBatch = false
		fs, kind := c.flushWaitLocked(self)
		c.mu.Unlock()
		wb.wake()
		if fs != nil {
			// The flush gives up the write role (writeFlusher).
			c.flushAndRead(fs, kind) // returns with mu held
			return
		}
		err := c.fw.Flush()
		c.mu.Lock()
		corks = 0
		if err != nil {
			c.writing = false
			c.idleCond.Broadcast()
			c.mu.Unlock()
			c.fail(&Error{Code: h2frame.ErrCodeNo, Initiator: InitiatorPeer, Reason: "write", Cause: err})
			c.mu.Lock()
			return
		}
		if (self == nil || !self.slot.pending()) && !c.closing {
			// Done with our own work: a parked sender takes over the
			// rest, so that nobody writes for everyone indefinitely.
			if s := c.parkedSenderLocked(); s != nil && s != self {
				s.slot.handoff = true
				s.signalSend()
				return // the role passes to s
			}
		}
	}
	c.writing = false
	c.idleCond.Broadcast()
}

// maxCorkYields bounds the yields of one writeLoop round before it
// flushes (see the cork in writeLoop).
const maxCorkYields = 4

// applyPeerSettingsLocked passes SETTINGS changes that concern encoding to
// fw before anything else is encoded.
func (c *Conn) applyPeerSettingsLocked() {
	if c.peer.appliedFrameSize != c.peer.maxFrameSize {
		c.peer.appliedFrameSize = c.peer.maxFrameSize
		c.fw.SetPeerMaxFrameSize(c.peer.maxFrameSize)
	}
	if c.peer.appliedTableSize != c.peer.headerTableSize {
		c.peer.appliedTableSize = c.peer.headerTableSize
		c.fw.Encoder().SetPeerMaxTableSize(c.peer.headerTableSize)
	}
}

func (c *Conn) encodeCtrlLocked() {
	for i := range c.ctrl {
		f := &c.ctrl[i]
		switch f.kind {
		case ctrlSettings:
			c.fw.WriteSettings(c.rare.localSettings...) // queued with them (queueSettingLocked)
		case ctrlSettingsAck:
			c.fw.WriteSettingsAck()
		case ctrlPing:
			c.fw.WritePing(false, f.data)
		case ctrlPingAck:
			c.fw.WritePing(true, f.data)
		case ctrlWindowUpdate:
			c.fw.WriteWindowUpdate(f.id, f.val)
		case ctrlRST:
			c.fw.WriteRSTStream(f.id, f.code)
		case ctrlGoAway:
			var debug []byte
			if c.rare != nil {
				debug = []byte(c.rare.goAwayDebug)
			}
			c.fw.WriteGoAway(f.id, f.code, debug)
		case ctrl431:
			c.fw.WriteHeaders(f.id, true, headers431)
		}
	}
	c.ctrl = c.ctrl[:0]
	if cap(c.ctrl) > 256 {
		c.ctrl = make([]ctrlFrame, 0, 8) // a burst passed; do not keep its memory
	}
	c.ledger().Release(int64(c.peerControl) * ctrlFrameBytes)
	c.peerControl = 0
}

// encodeStreamsLocked runs round-robin over the ready list, one frame per
// stream per round, until the batch budget is spent or no stream can make
// progress.
func (c *Conn) encodeStreamsLocked(self *Stream, wb *wakeBatch) {
	budget := c.cfg.WriteBatchBytes
	for budget > 0 && c.ready.n > 0 {
		progress := false
		for n := c.ready.n; n > 0 && budget > 0; n-- {
			s := c.ready.pop()
			orphan := s.slot.state == slotOrphan
			p, keep := c.encodeOneLocked(s, &budget, wb)
			if p && s != self {
				c.heldBatch = false
			}
			progress = progress || p
			if keep {
				c.ready.push(s)
			} else if orphan && s.slot.state == slotEmpty {
				// Released while its item waited (Release): it is out.
				c.recycleLocked(s)
			}
		}
		if !progress {
			return
		}
	}
}

// encodeOneLocked encodes at most one frame of the item in s's send slot,
// the part its phase names. It reports whether it wrote something and
// whether s stays in the ready list.
func (c *Conn) encodeOneLocked(s *Stream, budget *int, wb *wakeBatch) (progress, keep bool) {
	sl := &s.slot
	if s.err != nil || !sl.pending() {
		return false, false
	}
	it := &sl.item
	switch sl.phase {
	case PartHeaders:
		end := it.End && it.Parts == PartHeaders
		st, err := s.state.sendHeaders(end)
		if err != nil {
			c.completeLocked(s, ErrSendClosed, wb)
			return false, false
		}
		c.fw.WriteHeaders(s.id, end, it.Headers)
		*budget -= 128
		sl.headersSent = true
		c.resetStrikes = true
		if next := sl.nextPart(); next != 0 {
			// The item goes on with its DATA or trailers in a later
			// round of this loop (the stream stays ready).
			sl.phase = next
			c.setStateLocked(s, st)
			return true, true
		}
		c.completeLocked(s, nil, wb)
		c.setStateLocked(s, st)
		return true, false
	case PartData:
		rem := int(it.dataLen()) - sl.off
		if rem == 0 && it.Parts&PartTrailers != 0 {
			// No DATA bytes before the trailers: straight to them,
			// without an empty frame.
			it.free()
			sl.phase = PartTrailers
			return true, true
		}
		end := it.End && it.Parts&PartTrailers == 0
		if rem == 0 {
			st, err := s.state.sendData(end)
			if err != nil {
				c.completeLocked(s, ErrSendClosed, wb)
				return false, false
			}
			c.fw.WriteData(s.id, end, nil)
			*budget -= h2frame.HeaderLen
			c.completeLocked(s, nil, wb)
			c.setStateLocked(s, st)
			return true, false
		}
		n := min(int64(rem), s.out.avail(), c.outflow.avail(), int64(c.peer.appliedFrameSize))
		if n <= 0 {
			// Blocked on the stream window: its WINDOW_UPDATE (or a
			// SETTINGS increase) puts it back. Blocked on the
			// connection window only: keep its place.
			if sl.state == slotQueued && it.Return == ReturnHeadersOut && it.Parts&PartTrailers == 0 {
				// Only window holds the item back and its fields are
				// out: its sender returns (ReturnHeadersOut), once.
				sl.to(evDetach)
				wb.add(s)
			}
			return false, s.out.avail() > 0
		}
		last := int(n) == rem
		dend := last && end
		c.fw.WriteDataBuffer(s.id, dend, it.Data, sl.off, int(n))
		s.out.take(n)
		c.outflow.take(n)
		sl.off += int(n)
		*budget -= int(n) + h2frame.HeaderLen
		c.resetStrikes = true
		if !last {
			return true, true
		}
		it.free() // the item's reference; fw holds its own until the flush
		st, _ := s.state.sendData(dend)
		if it.Parts&PartTrailers != 0 {
			sl.phase = PartTrailers
			c.setStateLocked(s, st)
			return true, true
		}
		c.completeLocked(s, nil, wb)
		c.setStateLocked(s, st)
		return true, false
	case PartTrailers:
		st, err := s.state.sendHeaders(true)
		if err != nil {
			c.completeLocked(s, ErrSendClosed, wb)
			return false, false
		}
		c.fw.WriteHeaders(s.id, true, it.Trailers)
		*budget -= 128
		c.resetStrikes = true
		c.completeLocked(s, nil, wb)
		c.setStateLocked(s, st)
		return true, false
	}
	return false, false
}

// completeLocked ends the item in s's send slot with err as its outcome and
// has wb wake its sender.
func (c *Conn) completeLocked(s *Stream, err error, wb *wakeBatch) {
	s.slot.complete(err)
	wb.add(s)
}

// wakeBatch holds the send channels of the parked senders whose items a
// writeLoop round encoded, to be signaled once the round lets go of mu:
// waking a parked goroutine (a channel send that readies it, often with a
// futex wake of an idle thread) inside mu lengthened every hold of the
// engine's busiest lock. A stale signal is harmless: waitItemLocked
// re-checks its slot after every wake-up, and a channel outlives any reuse
// of its Stream.
type wakeBatch struct {
	ch [32]chan struct{}
	n  int
}

// add notes that s's sender is to be woken, or wakes it now when the batch
// is full.
func (w *wakeBatch) add(s *Stream) {
	if !s.slot.parked {
		return
	}
	if w.n == len(w.ch) {
		s.signalSend()
		return
	}
	w.ch[w.n] = s.sendCh
	w.n++
}

// wake signals every noted sender.
func (w *wakeBatch) wake() {
	for i := range w.n {
		select {
		case w.ch[i] <- struct{}{}:
		default:
		}
		w.ch[i] = nil
	}
	w.n = 0
}
