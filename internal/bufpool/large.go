package bufpool

import "math/bits"

// Large buffers: above the classes of classes.go (4 MiB) and up to
// maxLargeShift, a Pool without a source of its own keeps freed buffers in
// free lists, so that a stream of large messages (a raised MaxRecvMsgSize)
// takes each message's send and receive buffers from the pool instead of
// allocating them per message; grpc-go's default pool keeps its large
// buffers too.
//
// A large buffer is allocated at the size asked for, rounded up to a page,
// not to a class: at these sizes a class's rounding is memory held for
// nothing, and users that charge a buffer's capacity to the memory budget
// (header blocks) would be charged it. The free lists are eight to a power
// of two (sizes up to 4.5, 5, 5.5, ... 8, 9, 10 MiB, ...), so a reused
// buffer exceeds the request by less than an eighth of it, and the few
// sizes a stream of large messages asks for (a message, a gathering
// buffer's growth steps) each find their own list. A free list is emptied
// by the garbage collector (two cycles without use), so a burst of large
// messages does not pin its memory for the process's life.
const (
	maxLargeShift  = 27 // 128 MiB: a 64 MiB message, its prefix and a gathering buffer's growth fit.
	largeStepShift = 3  // 2^3 free lists per power of two
	numLarge       = (maxLargeShift - maxClassShift) << largeStepShift
	largePage      = 4 << 10
)

// largeIndex returns the free list for large buffers of n bytes, or -1
// when n is not above the classes or is above 1<<maxLargeShift.
func largeIndex(n int) int {
	if n <= 1<<maxClassShift || n > 1<<maxLargeShift {
		return -1
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n <= 2^(k+1)
	step := 1 << (k - largeStepShift)
	sub := (n - 1<<k - 1) / step // 2^k + sub*step < n <= 2^k + (sub+1)*step
	return (k-maxClassShift)<<largeStepShift + sub
}

// largeSize is the capacity allocated for a large request of n bytes: n
// rounded up to a page, which keeps it in n's free list (the lists' bounds
// are multiples of a page).
func largeSize(n int) int {
	return (n + largePage - 1) &^ (largePage - 1)
}

// getLarge returns a buffer of at least n bytes from free list i, or nil
// when the list's next one is shorter (it stays there, for a request it
// holds).
func (p *Pool) getLarge(i, n int) *Buffer {
	b, _ := p.large[i].Get().(*Buffer)
	if b != nil && cap(b.mem) < n {
		p.large[i].Put(b)
		return nil
	}
	return b
}
