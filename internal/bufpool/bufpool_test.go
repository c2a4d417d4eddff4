package bufpool

import (
	"math/bits"
	"sync"
	"testing"
)

func TestClassIndex(t *testing.T) {
	for i := 0; i < numClasses; i++ {
		size := classSize(i)
		if got := classIndex(size); got != i {
			t.Fatalf("classIndex(%d) = %d, want %d", size, got, i)
		}
		if i > 0 {
			if got := classIndex(classSize(i-1) + 1); got != i {
				t.Fatalf("classIndex(%d) = %d, want %d", classSize(i-1)+1, got, i)
			}
		}
	}
	if classSize(numClasses-1) != 1<<maxClassShift {
		t.Fatalf("largest class %d", classSize(numClasses-1))
	}
	if classIndex(1<<maxClassShift+1) != -1 {
		t.Fatal("above the largest class should be -1")
	}
}

func TestWasteBound(t *testing.T) {
	p := New(nil)
	for _, n := range []int{1, 65, 100, 1025, 33 << 10, 1<<20 + 1, 3 << 20, 16_000_005, 48<<20 + 1, 1 << maxLargeShift} {
		b := p.Get(n)
		if b.Len() != n {
			t.Fatalf("Get(%d) len %d", n, b.Len())
		}
		if n > 64 && b.Cap() > n*3/2+1 {
			t.Fatalf("Get(%d) cap %d: more than 1.5x", n, b.Cap())
		}
		b.Free()
	}
}

func TestRefCounting(t *testing.T) {
	p := New(nil)
	b := p.Get(100)
	if p.Outstanding() != 1 {
		t.Fatalf("outstanding %d", p.Outstanding())
	}
	b.Ref()
	b.Free()
	if p.Outstanding() != 1 {
		t.Fatal("freed while referenced")
	}
	b.Free()
	if p.Outstanding() != 0 {
		t.Fatalf("outstanding %d after last free", p.Outstanding())
	}
}

func TestMemConversion(t *testing.T) {
	p := New(nil)
	for _, n := range []int{10, 4096} {
		b := p.Get(n)
		for i := range b.Bytes() {
			b.Bytes()[i] = byte(i)
		}
		m := b.Mem()
		if m.Len() != n || m.ReadOnlyData()[n-1] != byte(n-1) {
			t.Fatalf("mem view wrong for %d", n)
		}
		m.Ref()
		m.Free()
		m.Free()
		if p.Outstanding() != 0 {
			t.Fatalf("size %d: outstanding %d after mem free", n, p.Outstanding())
		}
	}
}

func TestGetFreeAllocatesNothing(t *testing.T) {
	p := New(nil)
	p.Get(16 << 10).Free()
	allocs := testing.AllocsPerRun(1000, func() {
		b := p.Get(16 << 10)
		b.Free()
	})
	if allocs != 0 {
		t.Fatalf("Get/Free allocates %v", allocs)
	}
}

// countingSource is a user's mem.BufferPool that counts what it lends.
type countingSource struct{ gets, puts int }

func (c *countingSource) Get(n int) *[]byte { c.gets++; b := make([]byte, n); return &b }
func (c *countingSource) Put(*[]byte)       { c.puts++ }

func TestUserSourceGetsMemoryBack(t *testing.T) {
	src := &countingSource{}
	p := New(src)
	b := p.Get(100)
	b.Ref()
	b.Free()
	if src.puts != 0 {
		t.Fatal("memory returned while referenced")
	}
	b.Free()
	if src.gets != 1 || src.puts != 1 || p.Outstanding() != 0 {
		t.Fatalf("gets %d puts %d outstanding %d", src.gets, src.puts, p.Outstanding())
	}
}

func TestOversizedBufferIsNotPooled(t *testing.T) {
	p := New(nil)
	n := 1<<maxLargeShift + 1
	b := p.Get(n)
	if b.Len() != n || b.Cap() < n {
		t.Fatalf("len %d cap %d", b.Len(), b.Cap())
	}
	b.Free()
	if p.Outstanding() != 0 {
		t.Fatalf("outstanding %d", p.Outstanding())
	}
}

// Owners on several goroutines drop their references at once: exactly one
// Free returns the memory, whichever comes last (run with -race).
func TestSharedFreeReturnsOnce(t *testing.T) {
	src := &countingSource{}
	p := New(src)
	for round := 0; round < 200; round++ {
		b := p.Get(64)
		const owners = 4
		for i := 1; i < owners; i++ {
			b.Ref()
		}
		var wg sync.WaitGroup
		for i := 0; i < owners; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.Free()
			}()
		}
		wg.Wait()
	}
	if src.puts != 200 || p.Outstanding() != 0 {
		t.Fatalf("puts %d outstanding %d", src.puts, p.Outstanding())
	}
}

// A large buffer (above the classes) is allocated at the size asked for,
// rounded to a page, and once freed serves the next request it holds in
// its free list.
func TestLargeBufferReuse(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	p := New(nil)
	const n = 16_000_005
	b := p.Get(n)
	if b.Len() != n || b.Cap() != largeSize(n) || b.Cap()-n >= largePage {
		t.Fatalf("Get(%d): len %d cap %d", n, b.Len(), b.Cap())
	}
	// The same size again, on the same goroutine: sync.Pool keeps what a
	// P put for its next Get (the goroutine may move to another P in
	// between, rarely: a few tries).
	reused := false
	for range 3 {
		first := &b.Bytes()[0]
		b.Free()
		b = p.Get(n - 1000)
		if reused = &b.Bytes()[0] == first; reused {
			break
		}
	}
	if !reused {
		t.Error("a freed 16 MB buffer was not reused for a request it holds")
	}
	b.Free()
	if p.Outstanding() != 0 {
		t.Fatalf("outstanding %d", p.Outstanding())
	}
}

// Each free list takes the sizes of one eighth of a power of two, and a
// size rounded to a page stays in its list: a buffer from a list holds any
// request of it with less than an eighth to spare.
func TestLargeIndex(t *testing.T) {
	if largeIndex(1<<maxClassShift) != -1 || largeIndex(1<<maxLargeShift+1) != -1 {
		t.Fatal("the large range begins past the classes and ends at 1<<maxLargeShift")
	}
	if largeIndex(1<<maxClassShift+1) != 0 || largeIndex(1<<maxLargeShift) != numLarge-1 {
		t.Fatalf("first list %d, last %d", largeIndex(1<<maxClassShift+1), largeIndex(1<<maxLargeShift))
	}
	lo := 1 << maxClassShift // the list's sizes are (lo, hi]
	for i := 0; i < numLarge; i++ {
		k := bits.Len(uint(lo)) - 1 // 2^k <= lo < 2^(k+1)
		hi := lo + 1<<(k-largeStepShift)
		for _, n := range []int{lo + 1, (lo + hi) / 2, hi - largePage + 1, hi} {
			if got := largeIndex(n); got != i {
				t.Fatalf("largeIndex(%d) = %d, want %d (sizes %d..%d)", n, got, i, lo+1, hi)
			}
			if got := largeIndex(largeSize(n)); got != i {
				t.Fatalf("largeSize(%d) = %d is in list %d, want %d", n, largeSize(n), got, i)
			}
		}
		if hi-lo > (lo+1)/8 {
			t.Fatalf("list %d: sizes %d..%d differ by more than an eighth", i, lo+1, hi)
		}
		lo = hi
	}
}
