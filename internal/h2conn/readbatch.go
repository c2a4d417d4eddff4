package h2conn

// A read's worth of frames under one hold of the engine lock.
//
// When a read holds whole frames only (HandleRead, the busy path), the
// reader takes mu once for the DATA and HEADERS among them instead of once
// a frame, and the receivers those frames wake are signaled once mu is let
// go at the end of the read, so that they do not queue on the lock the
// reader still holds. Anything that takes mu itself (the other frame
// types, a stream error's reset, a server's HandleStream) or must not wait
// for the end of the read (a request's arrival, which starts its handler)
// lets the hold go first, and the next frame takes it again.

// readBatch is the reader's state over one read's frames; it lives on the
// reader's stack. nil means no batch: every frame takes and lets go of mu
// itself. Whether the reader holds mu is readSource.batchHeld, where the
// frame reader's call into the engine for a DATA frame's destination
// (connSink.DataDest) finds it.
type readBatch struct {
	nw int
	// wake holds the receive channels of receivers the frames woke,
	// signaled once mu is let go. A stale signal is harmless (see
	// wakeBatch).
	wake [32]chan struct{}
}

// lockFrame takes mu for a frame, unless the batch holds it already.
func (c *Conn) lockFrame(rb *readBatch) {
	if rb == nil {
		c.mu.Lock()
		return
	}
	if !c.src.batchHeld {
		c.mu.Lock()
		c.src.batchHeld = true
	}
}

// unlockFrame lets go of mu, held for a frame (lockFrame): its path goes on
// without it.
func (c *Conn) unlockFrame(rb *readBatch) {
	if rb == nil {
		c.mu.Unlock()
		return
	}
	c.releaseBatch(rb)
}

// releaseBatch lets go of the batch's hold of mu, if it has one: before a
// frame whose handler takes mu itself. Without a batch nothing is held.
func (c *Conn) releaseBatch(rb *readBatch) {
	if rb != nil && c.src.batchHeld {
		c.src.batchHeld = false
		c.mu.Unlock()
	}
}

// doneFrame ends a frame's path that made a's request arrive (a may be
// nil): it lets go of mu and calls a. With a batch and no arrival, mu stays
// held for the next frame.
func (c *Conn) doneFrame(rb *readBatch, a ArrivalHandler) {
	if rb == nil {
		c.mu.Unlock()
		if a != nil {
			a.RequestArrived()
		}
		return
	}
	if a == nil {
		return
	}
	// A request that arrived starts its handler now, not at the end of
	// the read: handlers that start while the reader goes on overlap its
	// dispatch (deferring them cost unary ×120 a tenth of its calls).
	c.endBatch(rb)
	a.RequestArrived()
}

// signalRecvFrame is signalRecv for a frame's path: with a batch the
// receiver is woken at the end of the read. Called with mu held.
func (s *Stream) signalRecvFrame(rb *readBatch) {
	if rb == nil || !s.recvWaiting {
		s.signalRecv()
		return
	}
	if rb.nw == len(rb.wake) {
		s.signalRecv() // a full batch wakes at once, under mu
		return
	}
	s.recvWaiting = false
	s.conn.parked.Add(-1)
	rb.wake[rb.nw] = s.recvCh
	rb.nw++
}

// endBatch lets go of the batch's hold of mu, if any, then wakes the
// receivers the batch collected.
func (c *Conn) endBatch(rb *readBatch) {
	if rb == nil {
		return
	}
	c.releaseBatch(rb)
	rb.wakeAll()
}

// wakeAll signals the receivers the batch collected.
func (rb *readBatch) wakeAll() {
	for i := range rb.nw {
		select {
		case rb.wake[i] <- struct{}{}:
		default:
		}
		rb.wake[i] = nil
	}
	rb.nw = 0
}
