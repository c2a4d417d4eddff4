package bufpool

import "math/bits"

// Size classes of a Pool without a source of its own (Pool.classes) run
// from minClass to maxClass bytes at every power of two and at one and a
// half times every power of two (64, 96, 128, 192, ...). A request just
// over a boundary therefore takes a buffer at most 1.5x its size instead of
// grpc-go's default tiers (256 B, 4 KiB, 16 KiB, 32 KiB, 1 MiB), where a
// 33 KiB message takes a 1 MiB buffer. Larger requests up to 128 MiB are
// allocated at their size and kept in the free lists of large.go; beyond
// that they are left to the garbage collector.
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
