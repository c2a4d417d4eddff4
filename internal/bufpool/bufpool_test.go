package bufpool

import (
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
	for _, n := range []int{1, 65, 100, 1025, 33 << 10, 1<<20 + 1, 3 << 20} {
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
	n := 1<<maxClassShift + 1
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
