package bufpool

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Size classes run from minClass to maxClass bytes at every power of two and
// at one and a half times every power of two (64, 96, 128, 192, ...). A
// request just over a boundary therefore takes a buffer at most 1.5x its size
// instead of grpc-go's default tiers (256 B, 4 KiB, 16 KiB, 32 KiB, 1 MiB),
// where a 33 KiB message takes a 1 MiB buffer.
const (
	minClassShift = 6  // 64 B: smaller requests round up to this.
	maxClassShift = 22 // 4 MiB: grpc-go's default receive limit plus prefix fits below 6 MiB.
	numClasses    = 2*(maxClassShift-minClassShift) + 1
)

// classIndex returns the index of the smallest class holding n bytes, or -1
// when n is above the largest class.
func classIndex(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	if n > 1<<maxClassShift {
		return -1
	}
	k := bits.Len(uint(n - 1)) // 2^(k-1) < n <= 2^k
	half := 3 << (k - 2)       // 1.5 * 2^(k-1)
	base := 2 * (k - 1 - minClassShift)
	if n <= half {
		return base + 1
	}
	return base + 2
}

// classSize is the capacity of buffers in class i.
func classSize(i int) int {
	shift := minClassShift + i/2
	if i%2 == 0 {
		return 1 << shift
	}
	return 3 << (shift - 1)
}

// Classes is a mem.BufferPool with the fine size classes above. It is the
// default source of a Pool; any other mem.BufferPool may replace it.
type Classes struct {
	pools [numClasses]sync.Pool
}

// NewClasses returns an empty class pool.
func NewClasses() *Classes {
	c := &Classes{}
	for i := range c.pools {
		size := classSize(i)
		c.pools[i].New = func() any {
			b := make([]byte, size)
			return &b
		}
	}
	return c
}

// Get returns a slice of length n from the class that fits it. Requests above
// the largest class are allocated directly and dropped by Put.
func (c *Classes) Get(n int) *[]byte {
	i := classIndex(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	p := c.pools[i].Get().(*[]byte)
	*p = (*p)[:n]
	return p
}

// Put returns a slice obtained from Get. Slices whose capacity is not exactly
// a class size did not come from here and are left to the garbage collector.
func (c *Classes) Put(p *[]byte) {
	n := cap(*p)
	i := classIndex(n)
	if i < 0 || classSize(i) != n {
		return
	}
	*p = (*p)[:n]
	c.pools[i].Put(p)
}

var _ mem.BufferPool = (*Classes)(nil)
