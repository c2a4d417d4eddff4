package bufpool

import (
	"bytes"
	"testing"
)

type releaseCount int

func (r *releaseCount) Released() { *r++ }

// TestWrap checks that a wrapped Buffer reads the caller's memory, tells
// of its last Free only, counts as outstanding meanwhile, and leaves the
// memory as it was.
func TestWrap(t *testing.T) {
	p := New(nil)
	base := p.Outstanding()
	data := bytes.Repeat([]byte{5}, 1000)
	var r releaseCount
	var b Buffer
	w := p.Wrap(&b, data, &r)
	if &w.Bytes()[0] != &data[0] || w.Len() != len(data) {
		t.Fatal("the wrapped Buffer does not read the caller's memory")
	}
	if p.Outstanding() != base+1 {
		t.Fatalf("outstanding %d, want %d", p.Outstanding(), base+1)
	}
	w.Ref()
	w.Free()
	if r != 0 {
		t.Fatal("released while an owner remains")
	}
	w.Free()
	if r != 1 {
		t.Fatalf("released %d times, want 1", r)
	}
	if p.Outstanding() != base {
		t.Fatalf("outstanding %d after the last Free, want %d", p.Outstanding(), base)
	}
	if !bytes.Equal(data, bytes.Repeat([]byte{5}, 1000)) {
		t.Fatal("the caller's memory changed")
	}
	// The same Buffer wraps again once released.
	p.Wrap(&b, data[:10], &r).Free()
	if r != 2 {
		t.Fatalf("released %d times after the second wrap, want 2", r)
	}
}
