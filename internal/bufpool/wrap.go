package bufpool

// Released is told that the last owner of a wrapped Buffer let go of it.
type Released interface {
	Released()
}

// Wrap makes b, a zero or released Buffer the caller provides, an owned
// Buffer over data, memory the pool neither owns nor keeps: a large field
// of a message being sent, which the write path then reads where it lies
// instead of from a copy. The last Free drops data and calls r.Released,
// so that data's owner learns that nobody reads it any more; b may be
// wrapped again from then on. Owners of a wrapped Buffer only read it.
//
// The caller keeps the Buffer itself (in an array beside its Released,
// say) rather than taking it from a shared free list: the last Free runs
// on the goroutine that wrote the bytes out, and a free list refilled on
// one processor and drained on another allocates as it goes.
func (p *Pool) Wrap(b *Buffer, data []byte, r Released) *Buffer {
	b.mem, b.b = data[:len(data):len(data)], data[:len(data):len(data)]
	b.pool, b.class, b.wrapped, b.released = p, -1, true, r
	b.refs = 1
	if counting.Load() {
		b.counted = true
		p.out.Add(1)
	}
	return b
}

// freeWrapped is Free's last step for a wrapped Buffer: the memory is the
// caller's, so it is neither poisoned nor kept.
func (b *Buffer) freeWrapped() {
	if b.counted {
		b.counted = false
		b.pool.out.Add(-1)
	}
	r := b.released
	b.mem, b.b, b.view, b.pool, b.released, b.wrapped = nil, nil, nil, nil, nil, false
	r.Released()
}
