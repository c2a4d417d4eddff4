package bufpool

import (
	"testing"

	"google.golang.org/grpc/mem"
)

// TestDetach: a detached buffer's last Free neither returns its memory to
// the pool nor poisons it (leangrpcdebug), for a pool of its own classes
// and for one drawing on a user's mem.BufferPool.
func TestDetach(t *testing.T) {
	for _, p := range []*Pool{New(nil), New(mem.NewTieredBufferPool(1 << 20))} {
		b := p.Get(64 << 10)
		for i := range b.Bytes() {
			b.Bytes()[i] = byte(i)
		}
		kept := b.Bytes()
		if !b.Detachable() {
			t.Fatal("a pooled buffer is not detachable")
		}
		b.Ref()
		b.Detach()
		b.Free()
		b.Free()
		for range 4 {
			o := p.Get(64 << 10)
			if &o.Bytes()[0] == &kept[0] {
				t.Fatal("the pool reused detached memory")
			}
			defer o.Free()
		}
		for i := range kept {
			if kept[i] != byte(i) {
				t.Fatalf("detached memory changed at %d", i)
			}
		}
	}
	if New(nil).Wrap(new(Buffer), make([]byte, 8), nil).Detachable() {
		t.Error("wrapped memory is detachable")
	}
}
