package h2frame

import "github.com/leangrpc/leangrpc/internal/bufpool"

// DataSink lets the layer above choose where the data of a DATA frame goes,
// so that the payloads of a message spanning frames land in that message's
// buffer at their offset instead of in a buffer of their own that is copied
// again later (ARCHITECTURE.md, "The path of a read").
type DataSink interface {
	// DataDest is asked, after the header and the pad length of a DATA
	// frame of stream id are read and before its data is, where the n
	// bytes of data (padding excluded, n ≥ sinkMinData) go. It returns an
	// owned reference on the destination buffer b and the slice dst of b
	// that the first min(n, len(dst)) bytes of data are written to; the
	// rest go to DataFrame.Data as without a sink. A nil b means no
	// destination. The reference travels in DataFrame.Sink to the caller
	// of ReadFrame, or the Reader frees it when the frame is not completed.
	DataDest(id uint32, n int) (b *bufpool.Buffer, dst []byte)
}

// SetDataSink makes the Reader ask s where DATA payloads go (nil: every
// payload gets a pooled buffer of its own).
func (r *Reader) SetDataSink(s DataSink) { r.sink = s }

// readDataSink reads the data of a DATA frame (the header is consumed, n is
// the payload length) into the destination the sink gives, when it gives
// one. handled is false, having consumed nothing, when it does not; the
// caller then reads the frame the usual way.
//
// Bytes already in the read buffer are copied into the destination; the
// rest is read from the source straight into it. Data past the destination
// goes to f.Data, padding is skipped.
func (r *Reader) readDataSink(f *DataFrame, n int, padded bool) (handled bool, err error) {
	hdr, pad := 0, 0
	if padded {
		if r.w == r.r {
			if err := r.fill(1); err != nil {
				return true, unexpected(err)
			}
		}
		hdr, pad = 1, int(r.rb[r.r])
		if pad >= n {
			return true, ConnError{ErrCodeProtocol, "data_pad_too_long"}
		}
	}
	dlen := n - hdr - pad
	if dlen < sinkMinData {
		return false, nil
	}
	b, dst := r.sink.DataDest(f.StreamID, dlen)
	if b == nil {
		return false, nil
	}
	k := min(len(dst), dlen)
	dst = dst[:k]
	r.r += hdr
	if err := r.readThrough(dst); err != nil {
		b.Free() // the landing's reference; the frame is not completed
		return true, err
	}
	if rest := dlen - k; rest > 0 {
		d := r.pool.Get(rest)
		if err := r.readThrough(d.Bytes()); err != nil {
			d.Free()
			b.Free() // the landing's reference; the frame is not completed
			return true, err
		}
		f.Data = d // ownership passes to the caller of ReadFrame
	}
	if pad > 0 {
		if err := r.skipThrough(pad); err != nil {
			if f.Data != nil {
				f.Data.Free()
				f.Data = nil
			}
			b.Free() // the landing's reference; the frame is not completed
			return true, err
		}
	}
	f.Sink, f.Landed = b, uint32(k) // ownership of the reference passes to the caller of ReadFrame
	return true, nil
}

// readThrough fills p with the next len(p) bytes: what the read buffer holds
// is copied; a rest of up to landRefillMax bytes is read into the emptied
// read buffer, together with what follows it, and copied; a longer rest is
// read from the source straight into p, after the emptied read buffer is
// given back (pooled mode) so that it is not held while the read blocks.
func (r *Reader) readThrough(p []byte) error {
	k := copy(p, r.rb[r.r:r.w])
	r.r += k
	if k == len(p) {
		return nil
	}
	if rest := len(p) - k; rest <= landRefillMax && rest <= r.rbSize && r.rbuf != nil {
		// The read buffer stays (fill would shed the frame being read
		// if it had to take a new one).
		r.r, r.w = 0, 0
		if err := r.fill(rest); err != nil {
			return unexpected(err)
		}
		r.r += copy(p[k:], r.rb[r.r:r.r+rest])
		return nil
	}
	r.release()
	return r.readRest(p[k:])
}

// skipThrough consumes n bytes as readThrough would read them. Unlike skip
// it never refills the read buffer, which in pooled mode would shed the
// frame being read.
func (r *Reader) skipThrough(n int) error {
	k := min(n, r.w-r.r)
	r.r += k
	if k == n {
		return nil
	}
	r.release()
	b := r.pool.Get(n - k)
	err := r.readRest(b.Bytes())
	b.Free() // scratch for the padding, dropped at once
	return err
}
