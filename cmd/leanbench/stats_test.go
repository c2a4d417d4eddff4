package main

import (
	"math"
	"testing"
	"time"
)

func TestBucketBoundaries(t *testing.T) {
	// Every bucket's range starts right after the previous one ends, and
	// values map back into the bucket whose range holds them.
	for i := 0; i < numBuckets-1; i++ {
		lo, hi := bucketLow(i), bucketHigh(i)
		if hi < lo {
			t.Fatalf("bucket %d: high %d < low %d", i, hi, lo)
		}
		if bucketLow(i+1) != hi+1 {
			t.Fatalf("bucket %d ends at %d, bucket %d starts at %d", i, hi, i+1, bucketLow(i+1))
		}
		if b := bucketOf(lo); b != i {
			t.Fatalf("bucketOf(%d) = %d, want %d", lo, b, i)
		}
		if b := bucketOf(hi); b != i {
			t.Fatalf("bucketOf(%d) = %d, want %d", hi, b, i)
		}
	}
	if b := bucketOf(math.MaxUint64); b != numBuckets-1 {
		t.Fatalf("bucketOf(max) = %d, want %d", b, numBuckets-1)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	// 1µs .. 10000µs, uniformly.
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.50, 5000 * time.Microsecond},
		{0.90, 9000 * time.Microsecond},
		{0.99, 9900 * time.Microsecond},
		{0.001, 10 * time.Microsecond},
	} {
		got := h.Quantile(tc.q)
		if rel := math.Abs(float64(got-tc.want)) / float64(tc.want); rel > 1.0/subCount {
			t.Errorf("Quantile(%v) = %v, want %v within 1/subCount", tc.q, got, tc.want)
		}
	}
	if h.Max() != 10000*time.Microsecond {
		t.Errorf("Max = %v, want 10ms", h.Max())
	}
	if h.Quantile(1) != 10000*time.Microsecond {
		t.Errorf("Quantile(1) = %v, want the maximum 10ms", h.Quantile(1))
	}
	if m := h.Mean(); m < 5000*time.Microsecond || m > 5001*time.Microsecond {
		t.Errorf("Mean = %v, want 5000.5µs", m)
	}
	if h.Count() != 10000 {
		t.Errorf("Count = %d, want 10000", h.Count())
	}
}

func TestHistogramSkewedAndMerge(t *testing.T) {
	// 99 fast observations and one slow one, split over two histograms.
	var a, b Histogram
	for i := 0; i < 99; i++ {
		a.Record(100 * time.Microsecond)
	}
	b.Record(50 * time.Millisecond)
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(new(Histogram)) // empty merges are no-ops
	near := func(got, want time.Duration) bool {
		return math.Abs(float64(got-want)) <= float64(want)/subCount
	}
	if got := m.Quantile(0.5); !near(got, 100*time.Microsecond) {
		t.Errorf("p50 = %v, want 100µs within 1/subCount", got)
	}
	if got := m.Quantile(0.99); !near(got, 100*time.Microsecond) {
		t.Errorf("p99 = %v, want 100µs within 1/subCount", got)
	}
	if got := m.Quantile(0.999); !near(got, 50*time.Millisecond) || got > 50*time.Millisecond {
		t.Errorf("p99.9 = %v, want 50ms within 1/subCount, not above the maximum", got)
	}
	if m.Count() != 100 || m.Max() != 50*time.Millisecond {
		t.Errorf("Count, Max = %d, %v; want 100, 50ms", m.Count(), m.Max())
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram: want zero quantile and mean")
	}
}

func TestHistogramRecordDoesNotAllocate(t *testing.T) {
	h := new(Histogram)
	d := time.Duration(1)
	if n := testing.AllocsPerRun(1000, func() {
		h.Record(d)
		d = d*3 + 7
	}); n != 0 {
		t.Errorf("Record allocates %v times per call, want 0", n)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestSizeAndLatencyLabels(t *testing.T) {
	for n, want := range map[int]string{0: "0B", 100: "100B", 1000: "1kB", 1_000_000: "1MB", 1 << 20: "1MiB", 65536: "64KiB", 1500: "1500B"} {
		if got := sizeLabel(n); got != want {
			t.Errorf("sizeLabel(%d) = %q, want %q", n, got, want)
		}
	}
	for us, want := range map[float64]string{12: "12µs", 1500: "1.50ms", 2.5e6: "2.50s"} {
		if got := latencyLabel(us); got != want {
			t.Errorf("latencyLabel(%v) = %q, want %q", us, got, want)
		}
	}
}

func BenchmarkHistogram(b *testing.B) {
	b.Run("Record", func(b *testing.B) {
		b.ReportAllocs()
		h := new(Histogram)
		d := time.Duration(1)
		for b.Loop() {
			h.Record(d)
			d = (d*31 + 7) % (10 * time.Second)
		}
	})
}
