// Package bufpool holds leangrpc's pooled, reference-counted byte buffers and
// the one pool that reads and writes share.
//
// A Buffer has one owner at a time. Functions that pass buffers around say in
// their doc comment which of these applies:
//   - "takes ownership": the callee frees it;
//   - "borrows until return": the caller keeps ownership;
//   - "returns an owned buffer": the caller must Free;
//   - "valid until the next X": a borrowed view.
//
// Ref adds an owner; each owner calls Free once.
package bufpool

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"
)

// Pool hands out Buffers whose bytes come from a mem.BufferPool. The zero
// value is not usable; use New or Default.
type Pool struct {
	src mem.BufferPool
	// out counts buffers handed out and not yet returned; leak checks in
	// tests compare it against a baseline.
	out atomic.Int64
}

var (
	defaultPool = New(nil)
	bufferObjs  = sync.Pool{New: func() any { return new(Buffer) }}
)

// New returns a Pool drawing bytes from src, or from a fresh Classes when src
// is nil. A user-supplied grpc-go mem.BufferPool plugs in here.
func New(src mem.BufferPool) *Pool {
	if src == nil {
		src = NewClasses()
	}
	return &Pool{src: src}
}

// Default returns the process-wide pool shared by every connection that is
// not given one of its own.
func Default() *Pool { return defaultPool }

// Source returns the mem.BufferPool the pool draws from, for handing to
// grpc-go codecs so that marshaled messages come from the same memory.
func (p *Pool) Source() mem.BufferPool { return p.src }

// Outstanding reports how many buffers are handed out and not yet freed.
func (p *Pool) Outstanding() int64 { return p.out.Load() }

// Get returns an owned buffer of length n (capacity may be larger). The
// contents are not zeroed.
func (p *Pool) Get(n int) *Buffer {
	b := bufferObjs.Get().(*Buffer)
	b.store = p.src.Get(n)
	b.b = (*b.store)[:n]
	b.pool = p
	b.refs.Store(1)
	p.out.Add(1)
	return b
}

// Copy returns an owned buffer holding a copy of data.
func (p *Pool) Copy(data []byte) *Buffer {
	b := p.Get(len(data))
	copy(b.b, data)
	return b
}

// Buffer is a reference-counted slice of pooled memory.
type Buffer struct {
	refs  atomic.Int32
	b     []byte  // the live bytes: a prefix of *store
	store *[]byte // what src.Get returned; handed back to src.Put
	pool  *Pool
	view  []byte // the slice handed to mem.NewBuffer by Mem
}

// Bytes returns the buffer's bytes, valid until the owner's Free.
func (b *Buffer) Bytes() []byte { return b.b }

// Len returns the number of live bytes.
func (b *Buffer) Len() int { return len(b.b) }

// Cap returns how many bytes the buffer can hold.
func (b *Buffer) Cap() int { return cap(*b.store) }

// SetLen sets the number of live bytes; n must not exceed Cap.
func (b *Buffer) SetLen(n int) { b.b = (*b.store)[:n] }

// Ref adds an owner.
func (b *Buffer) Ref() {
	if b.refs.Add(1) <= 1 && debug {
		panic("bufpool: Ref of a freed buffer")
	}
}

// Free drops one owner; the last one returns the memory to the pool.
func (b *Buffer) Free() {
	n := b.refs.Add(-1)
	if n > 0 {
		return
	}
	if n < 0 {
		if debug {
			panic("bufpool: double free")
		}
		return
	}
	if debug {
		poison(*b.store)
	}
	p := b.pool
	p.src.Put(b.store)
	p.out.Add(-1)
	b.store, b.b, b.view, b.pool = nil, nil, nil, nil
	bufferObjs.Put(b)
}

// Mem converts one reference to a grpc-go mem.Buffer for codecs and
// mem.BufferSlice users. It takes ownership of the caller's reference: the
// mem.Buffer's last Free releases it. Buffers below grpc-go's pooling
// threshold are copied, since mem would otherwise never hand them back.
func (b *Buffer) Mem() mem.Buffer {
	if mem.IsBelowBufferPoolingThreshold(len(b.b)) {
		s := make(mem.SliceBuffer, len(b.b))
		copy(s, b.b)
		b.Free()
		return s
	}
	b.view = b.b
	return mem.NewBuffer(&b.view, (*memRelease)(b))
}

// MemRange is Mem for the bytes [lo, hi) only. It takes ownership of the
// caller's reference, as Mem does.
func (b *Buffer) MemRange(lo, hi int) mem.Buffer {
	if mem.IsBelowBufferPoolingThreshold(hi - lo) {
		s := make(mem.SliceBuffer, hi-lo)
		copy(s, b.b[lo:hi])
		b.Free()
		return s
	}
	b.view = b.b[lo:hi:hi]
	return mem.NewBuffer(&b.view, (*memRelease)(b))
}

// memRelease lets a mem.Buffer hand a reference back to its Buffer.
type memRelease Buffer

func (r *memRelease) Get(int) *[]byte { panic("bufpool: Get on a mem release hook") }
func (r *memRelease) Put(*[]byte)     { (*Buffer)(r).Free() }
