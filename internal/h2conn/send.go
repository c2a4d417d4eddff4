package h2conn

import "github.com/leangrpc/leangrpc/internal/hpack"

// Send hands it to the connection's writer (sendslot.go says how the item
// travels). It returns once the item is encoded (not necessarily flushed),
// or earlier as it.Return allows; it fails, having sent nothing of it, with
//
//   - ErrConcurrentWrite when another goroutine's Send on the stream has not
//     returned (it may be waiting for window with part of its message
//     out): the second send is refused whole, so the first one's frames
//     stay contiguous;
//   - ErrSendClosed after an item that ended the stream;
//   - ErrEmptyItem for an item without parts;
//   - ErrHeadersNotSent for DATA before the HEADERS;
//   - ErrTrailersMustEnd for HEADERS after the first that do not end the
//     stream, or come with other parts;
//   - ErrPseudoInTrailers for trailers with a pseudo-header field, and
//     ErrNoStatus for a server's first HEADERS without :status;
//   - a *HeaderListTooLargeError for fields over the peer's limit;
//   - the stream's *Error once it was reset or the connection ended, also
//     while the item waits (what is left of it is dropped).
//
// An item an earlier Send left behind is waited for first, and its failure
// is this Send's. Send takes ownership of it.Data in every case.
func (s *Stream) Send(it SendItem) error {
	c := s.conn
	c.mu.Lock()
	sl := &s.slot
	if sl.sender {
		c.mu.Unlock()
		it.free()
		return ErrConcurrentWrite
	}
	sl.sender = true
	if it.Parts == PartData && sl.joinable() && s.err == nil {
		// A unary request's message joins its HEADERS, still in the
		// slot: one item, one write.
		sl.join(it)
		if c.writing && !c.closing && s.windowsAdmitLocked(it.dataLen()) {
			sl.sender = false
			c.mu.Unlock()
			return nil
		}
		sl.attach()
		return s.waitSendLocked()
	}
	if err := s.sendableLocked(&it); err != nil {
		sl.sender = false
		// Frames an earlier item held for this one go now (SendItem.Hold).
		c.flushLocked()
		c.mu.Unlock()
		it.free()
		return err
	}
	sl.queue(it)
	c.readyLocked(s)
	if it.Return == ReturnHandedOver && c.writing && !c.closing && s.windowsAdmitLocked(it.dataLen()) {
		// Someone else holds the write role and will encode the item
		// without waiting for window: return rather than park until it
		// is encoded.
		sl.detach()
		sl.sender = false
		c.mu.Unlock()
		return nil
	}
	return s.waitSendLocked()
}

// windowsAdmitLocked reports whether n DATA bytes fit the stream's and the
// connection's send windows now.
func (s *Stream) windowsAdmitLocked(n int64) bool {
	return n <= s.out.avail() && n <= s.conn.outflow.avail()
}

// sendableLocked waits for an item an earlier Send left, then reports why
// it cannot be queued now, or nil. Called with mu held and the slot's
// sender set.
func (s *Stream) sendableLocked(it *SendItem) error {
	sl := &s.slot
	if err := s.awaitEarlierLocked(); err != nil {
		return err
	}
	switch {
	case it.Parts == 0:
		return ErrEmptyItem
	case s.err != nil:
		return s.err
	case sl.state != slotEmpty:
		return ErrConcurrentWrite
	}
	if it.Parts&PartHeaders == 0 {
		switch {
		case !sl.headersSent:
			return ErrHeadersNotSent
		case sl.ended || !s.state.canSend():
			return ErrSendClosed
		}
	} else {
		switch {
		case sl.ended || !s.state.canSend() && s.state != stateIdle:
			return ErrSendClosed
		case sl.headersSent && (it.Parts != PartHeaders || !it.End):
			return ErrTrailersMustEnd
		case sl.headersSent && hasPseudo(it.Headers):
			return ErrPseudoInTrailers
		case !sl.headersSent && !s.local && !hasStatus(it.Headers):
			return ErrNoStatus
		}
		if err := s.conn.headerListFitsLocked(it.Headers); err != nil {
			return err
		}
	}
	if it.Parts&PartTrailers != 0 {
		if hasPseudo(it.Trailers) {
			return ErrPseudoInTrailers
		}
		return s.conn.headerListFitsLocked(it.Trailers)
	}
	return nil
}

// hasStatus reports whether fields hold :status, which a response's
// first HEADERS must (RFC 9113 §8.3.2).
func hasStatus(fields []hpack.HeaderField) bool {
	for i := range fields {
		if fields[i].Name == ":status" {
			return true
		}
	}
	return false
}

// hasPseudo reports whether fields hold a pseudo-header, which trailers
// must not (RFC 9113 §8.1): the peer would reset the stream.
func hasPseudo(fields []hpack.HeaderField) bool {
	for i := range fields {
		if n := fields[i].Name; n != "" && n[0] == ':' {
			return true
		}
	}
	return false
}

// awaitEarlierLocked waits for a detached item to go out and takes the
// outcome of a done one. Called and returns with mu held.
func (s *Stream) awaitEarlierLocked() error {
	sl := &s.slot
	switch sl.state {
	case slotDetached:
		sl.attach()
		return s.waitItemLocked()
	case slotDone:
		return sl.collect()
	}
	return nil
}

// waitSendLocked waits for the slot's item (waitItemLocked) and ends the
// Send. Called with mu held; returns with it released.
func (s *Stream) waitSendLocked() error {
	err := s.waitItemLocked()
	s.slot.sender = false
	s.conn.mu.Unlock()
	return err
}

// waitItemLocked waits until the queued item is out, failed, or detached
// by the writer (ReturnHeadersOut), writing itself whenever nobody else
// holds the write role, and returns the outcome. Called and returns with mu
// held.
func (s *Stream) waitItemLocked() error {
	c := s.conn
	sl := &s.slot
	for {
		switch sl.state {
		case slotDone:
			return sl.collect()
		case slotQueued:
		default:
			return nil // detached: what is left needs no more of its sender
		}
		if s.err != nil {
			sl.complete(s.err)
			continue
		}
		if !c.writing && !c.closing && c.wantWrite {
			c.writing = true
			c.writeLoop(s)
			continue
		}
		sl.parked = true
		c.parked.Add(1)
		c.handOverToReader() // a window update may be what it waits for
		done := s.cancel
		c.mu.Unlock()
		s.park(s.sendCh, done)
		c.mu.Lock()
		c.parked.Add(-1)
		sl.parked = false
		if sl.handoff {
			sl.handoff = false
			c.writeLoop(s)
		}
	}
}

// dropSendLocked drops the item of a failed stream, whose outcome is the
// stream's error.
func (s *Stream) dropSendLocked() {
	if s.slot.pending() {
		s.slot.complete(s.err)
	}
}

// HeadersSent reports whether the stream's HEADERS are encoded: after a
// failed Send of HeadersDataItem, whether the response began.
func (s *Stream) HeadersSent() bool {
	c := s.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.slot.headersSent
}
