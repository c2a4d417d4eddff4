package main

import (
	"math"
	"math/bits"
	"runtime"
	"sort"
	"time"
)

// Histogram of durations in nanoseconds with fixed log-linear buckets:
// values below 64 are exact, above that each power of two is split into 64
// buckets, so a reported quantile (a bucket's middle) is within 1/128
// (0.8%) of the true value. With 16 buckets per power of two a single
// call's p50 of ~17 µs was known only to within a 1 µs bucket, too coarse
// for a ratio judged against 0.6. A Histogram is 30 KiB.
// Recording never allocates. A Histogram is owned by one worker goroutine;
// the workers' histograms are merged after they have all finished.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    uint64
	min    uint64
	max    uint64
}

const (
	subBits    = 6
	subCount   = 1 << subBits
	numBuckets = (64 - subBits + 1) * subCount // the last bucket holds 2^63 and above
)

func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - 1 // e >= subBits
	m := (v >> uint(e-subBits)) & (subCount - 1)
	return (e-subBits+1)*subCount + int(m)
}

// bucketLow returns the smallest value that falls into bucket i.
func bucketLow(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	e := i/subCount + subBits - 1
	m := uint64(i % subCount)
	return (subCount + m) << uint(e-subBits)
}

// bucketHigh returns the largest value that falls into bucket i.
func bucketHigh(i int) uint64 {
	if i >= numBuckets-1 {
		return math.MaxUint64
	}
	return bucketLow(i+1) - 1
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
}

// Merge adds the observations of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest observation.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the mean observation.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Quantile returns an estimate of the q-quantile (0 < q <= 1): the middle
// of the bucket that holds the rank ceil(q*n), clamped to the observed
// minimum and maximum.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	if rank > h.n {
		rank = h.n
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			lo, hi := bucketLow(i), bucketHigh(i)
			v := lo + (hi-lo)/2
			if v < h.min {
				v = h.min
			}
			if v > h.max {
				v = h.max
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

// snapshot holds the process counters that a run reports as deltas.
type snapshot struct {
	t          time.Time
	mallocs    uint64
	totalAlloc uint64
	cpu        time.Duration // user + system, whole process
}

func takeSnapshot() snapshot {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return snapshot{t: time.Now(), mallocs: ms.Mallocs, totalAlloc: ms.TotalAlloc, cpu: processCPU()}
}

// median returns the median of xs (the mean of the two middle values for an
// even count); it sorts a copy.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
