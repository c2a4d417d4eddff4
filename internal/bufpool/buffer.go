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

// Pool hands out Buffers. With its own size classes (New(nil)) each pooled
// Buffer keeps its memory between uses, so Get and the last Free each cost
// one sync.Pool operation; with a user's mem.BufferPool the bytes come from
// that pool and the Buffer around them from a shared free list. The zero
// value is not usable; use New or Default.
type Pool struct {
	// classes holds free Buffers with their memory attached, one
	// sync.Pool per size class; nil when src is set.
	classes *[numClasses]sync.Pool
	// large holds free Buffers above the classes with their memory
	// attached, one sync.Pool per range of sizes (large.go); nil when
	// src is set.
	large *[numLarge]sync.Pool
	src   mem.BufferPool
	// out counts the buffers handed out, while counting is on, and not
	// yet freed; leak checks in tests compare it against a baseline.
	out atomic.Int64
}

// counting turns on the Outstanding counts. The first Outstanding call sets
// it: a count shared by every Get and Free is a cache line every core
// writes, a visible cost on the hot path (PERFORMANCE.md, "The single call
// from 16.5 to 14.7 µs"), and only tests read it.
var counting atomic.Bool

var (
	defaultPool = New(nil)
	bufferObjs  = sync.Pool{New: func() any { return new(Buffer) }}
)

// New returns a Pool drawing bytes from src, or from its own size classes
// when src is nil. A user-supplied grpc-go mem.BufferPool plugs in here.
func New(src mem.BufferPool) *Pool {
	if src != nil {
		return &Pool{src: src}
	}
	return &Pool{classes: new([numClasses]sync.Pool), large: new([numLarge]sync.Pool)}
}

// Default returns the process-wide pool shared by every connection that is
// not given one of its own.
func Default() *Pool { return defaultPool }

// CountOutstanding turns on the counts Outstanding reports. Test packages
// that check for leaked buffers call it from an init function, so that
// every buffer of the test binary is counted.
func CountOutstanding() { counting.Store(true) }

// Outstanding reports how many buffers are handed out and not yet freed.
// Only buffers handed out since counting began are counted: it begins with
// CountOutstanding, or with the first Outstanding call, so that a leak
// check whose baseline comes from Outstanding works either way.
func (p *Pool) Outstanding() int64 {
	counting.Store(true)
	return p.out.Load()
}

// Get returns an owned buffer of length n (capacity may be larger). The
// contents are not zeroed.
func (p *Pool) Get(n int) *Buffer {
	var b *Buffer
	if i := classIndex(n); p.classes != nil && i >= 0 {
		b, _ = p.classes[i].Get().(*Buffer)
		if b == nil {
			b = &Buffer{mem: make([]byte, classSize(i)), pool: p, class: int8(i)}
		}
	} else if j := largeIndex(n); p.classes != nil && j >= 0 {
		if b = p.getLarge(j, n); b == nil {
			b = &Buffer{mem: make([]byte, largeSize(n)), pool: p, class: int8(numClasses + j)}
		}
	} else {
		b = bufferObjs.Get().(*Buffer)
		if p.classes != nil {
			b.mem = make([]byte, n) // above the large range: not pooled
		} else {
			b.store = p.src.Get(n)
			b.mem = (*b.store)[:cap(*b.store)]
		}
		b.pool, b.class = p, -1
	}
	b.b = b.mem[:n]
	// Not yet shared with anyone: a plain store is enough.
	b.refs = 1
	if counting.Load() {
		b.counted = true
		p.out.Add(1)
	}
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
	// refs counts owners. It changes atomically while there may be more
	// than one; an owner that sees 1 is the only one, so no other
	// goroutine can touch it.
	refs     int32
	class    int8    // index into pool.classes, numClasses+i for pool.large[i], or -1: not kept with the Buffer
	counted  bool    // counted in pool.out
	wrapped  bool    // mem is a caller's (Wrap): never written, poisoned or kept
	detached bool    // the memory left the pool (Detach): the last Free drops it untouched
	b        []byte  // the live bytes: a prefix of mem
	mem      []byte  // all of the memory, at its full capacity
	store    *[]byte // with a user's pool: what src.Get returned, for src.Put
	pool     *Pool
	view     []byte // the slice handed to mem.NewBuffer by Mem
	// released is told of the last Free of a wrapped Buffer (Wrap).
	released Released
}

// Bytes returns the buffer's bytes, valid until the owner's Free.
func (b *Buffer) Bytes() []byte { return b.b }

// Len returns the number of live bytes.
func (b *Buffer) Len() int { return len(b.b) }

// Cap returns how many bytes the buffer can hold.
func (b *Buffer) Cap() int { return cap(b.mem) }

// SetLen sets the number of live bytes; n must not exceed Cap.
func (b *Buffer) SetLen(n int) { b.b = b.mem[:n] }

// Advance drops the first n live bytes (a header the bytes' next reader
// does not want); n must not exceed Len. A later SetLen counts from the
// start of the memory again.
func (b *Buffer) Advance(n int) { b.b = b.b[n:] }

// Ref adds an owner.
func (b *Buffer) Ref() {
	if atomic.AddInt32(&b.refs, 1) <= 1 && debug {
		panic("bufpool: Ref of a freed buffer")
	}
}

// Free drops one owner; the last one returns the memory to the pool.
func (b *Buffer) Free() {
	// The sole owner, the common case, skips the locked decrement: with
	// one reference left, nobody else may Ref or Free this buffer.
	if atomic.LoadInt32(&b.refs) != 1 {
		n := atomic.AddInt32(&b.refs, -1)
		if n > 0 {
			return
		}
		if n < 0 {
			if debug {
				panic("bufpool: double free")
			}
			return
		}
	}
	b.refs = 0 // a second Free sees 0 and goes negative, as above
	p := b.pool
	if b.wrapped {
		b.freeWrapped()
		return
	}
	if b.counted {
		b.counted = false
		p.out.Add(-1)
	}
	b.view = nil
	if b.detached {
		// Whoever kept views of the memory (Detach) keeps it alive; the
		// pool forgets it, without poisoning it.
		b.detached = false
		b.store, b.mem, b.b, b.pool = nil, nil, nil, nil
		bufferObjs.Put(b)
		return
	}
	if debug {
		poison(b.mem)
	}
	if b.class >= numClasses {
		// The memory stays with the Buffer for its next Get.
		p.large[b.class-numClasses].Put(b)
		return
	}
	if b.class >= 0 {
		// The memory stays with the Buffer for its next Get.
		p.classes[b.class].Put(b)
		return
	}
	if b.store != nil {
		p.src.Put(b.store)
	}
	b.store, b.mem, b.b, b.pool = nil, nil, nil, nil
	bufferObjs.Put(b)
}

// Detach takes the buffer's memory out of the pool for good: after the
// last Free it is neither reused nor poisoned, so views of it stay valid
// for as long as they are referenced, the garbage collector keeping the
// memory alive. A received message whose fields alias its buffer needs
// that. Only a Detachable buffer may be detached; the caller must hold a
// reference.
func (b *Buffer) Detach() {
	if b.wrapped {
		panic("bufpool: Detach of memory the pool does not own")
	}
	b.detached = true
}

// Detachable reports whether Detach may take the memory: false for memory
// the pool does not own (Wrap), whose owner reuses it.
func (b *Buffer) Detachable() bool { return !b.wrapped }

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
