package h2frame

// readData reads the payload of a DATA frame (RFC 9113 §6.1) into its own
// pooled buffer, which the returned frame hands to the caller.
//
// Three paths, by where the payload is (thresholds in limits.go):
//   - wholly in the read buffer: copied into an exact-size buffer;
//   - partly there and at most smallDataMax long: the read buffer is
//     refilled (one read that may bring in the next frames too), then copied;
//   - partly there and longer: the part already read is copied into a
//     payload-size buffer and the rest is read straight into it.
func (r *Reader) readData(h FrameHeader) (Frame, error) {
	if h.StreamID == 0 {
		// Consume nothing: the error closes the connection.
		return nil, ConnError{ErrCodeProtocol, "data_stream_0"}
	}
	n := int(h.Length)
	padded := h.Flags.Has(FlagPadded)
	if padded && n == 0 {
		return nil, ConnError{ErrCodeFrameSize, "data_too_short"}
	}
	f := &r.df
	f.FrameHeader = h
	f.FlowLen = h.Length
	f.Data, f.Sink, f.Landed = nil, nil, 0

	avail := r.w - r.r
	if avail < n && n <= min(smallDataMax, r.rbSize) {
		if err := r.fill(n); err != nil {
			return nil, unexpected(err)
		}
		avail = r.w - r.r
	}
	if r.sink != nil && n >= sinkMinData {
		if handled, err := r.readDataSink(f, n, padded); handled {
			if err != nil {
				return nil, err
			}
			return f, nil
		}
		avail = r.w - r.r // the pad length may have been read in
	}
	if avail >= n {
		p := r.rb[r.r : r.r+n]
		r.r += n
		if padded {
			pad := int(p[0])
			if pad >= n {
				return nil, ConnError{ErrCodeProtocol, "data_pad_too_long"}
			}
			p = p[1 : n-pad]
		}
		if len(p) > 0 {
			f.Data = r.pool.Copy(p)
		}
		return f, nil
	}

	// Large payload, partly read: copy what is here, read the rest
	// directly. The read buffer is empty afterwards; let it go before
	// blocking on the rest.
	b := r.pool.Get(n)
	p := b.Bytes()
	k := copy(p, r.rb[r.r:r.w])
	r.r += k
	r.release()
	if err := r.readRest(p[k:]); err != nil {
		b.Free()
		return nil, err
	}
	if padded {
		pad := int(p[0])
		if pad >= n {
			b.Free()
			return nil, ConnError{ErrCodeProtocol, "data_pad_too_long"}
		}
		m := copy(p, p[1:n-pad])
		if m == 0 {
			b.Free()
			return f, nil
		}
		b.SetLen(m)
	}
	f.Data = b // ownership passes to the caller of ReadFrame
	return f, nil
}
