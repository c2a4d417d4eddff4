package h2frame

// HoldsReadBuffer reports whether the Reader holds a pooled read buffer.
func (r *Reader) HoldsReadBuffer() bool { return r.frames != nil && r.rbuf != nil }

// HoldsScratch reports whether the Reader holds its frame structs.
func (r *Reader) HoldsScratch() bool { return r.frames != nil }
