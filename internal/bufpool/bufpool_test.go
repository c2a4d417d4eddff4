package bufpool

import (
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
	c := NewClasses()
	for _, n := range []int{1, 65, 100, 1025, 33 << 10, 1<<20 + 1, 3 << 20} {
		p := c.Get(n)
		if len(*p) != n {
			t.Fatalf("Get(%d) len %d", n, len(*p))
		}
		if n > 64 && cap(*p) > n*3/2+1 {
			t.Fatalf("Get(%d) cap %d: more than 1.5x", n, cap(*p))
		}
		c.Put(p)
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
