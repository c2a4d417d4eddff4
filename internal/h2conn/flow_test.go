package h2conn

import (
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
)

func TestOutflow(t *testing.T) {
	var f outflow
	f.n = 100
	f.take(60)
	if f.avail() != 40 {
		t.Fatalf("avail %d", f.avail())
	}
	if !f.add(-100) || f.avail() != 0 || f.n != -60 {
		t.Fatalf("negative window: n=%d avail=%d", f.n, f.avail())
	}
	if !f.add(h2frame.MaxWindowSize) {
		t.Fatal("add within limit refused")
	}
	f.n = h2frame.MaxWindowSize
	if f.add(1) || f.n != h2frame.MaxWindowSize {
		t.Fatal("overflow past 2^31-1 accepted")
	}
}

func TestInflow(t *testing.T) {
	var f inflow
	f.init(1000)
	if !f.take(1000) || f.take(1) {
		t.Fatal("window accounting wrong")
	}
	// Batched: nothing until a quarter of the window is owed.
	if inc := f.credit(100, 1000); inc != 0 {
		t.Fatalf("credit 100/1000 sent %d", inc)
	}
	if inc := f.credit(150, 1000); inc != 250 {
		t.Fatalf("credit to 250/1000 sent %d, want 250", inc)
	}
	if f.avail != 250 || f.unsent != 0 {
		t.Fatalf("after update avail=%d unsent=%d", f.avail, f.unsent)
	}
	// widen opens the window for a whole message at once.
	if inc := f.widen(5000); inc != 4750 || f.avail != 5000 {
		t.Fatalf("widen: inc=%d avail=%d", inc, f.avail)
	}
	if inc := f.widen(100); inc != 0 {
		t.Fatalf("widen below avail sent %d", inc)
	}
	// Never above 2^31-1.
	f.init(h2frame.MaxWindowSize - 10)
	f.take(5)
	if inc := f.widen(1 << 40); int64(inc)+f.avail-int64(inc) > h2frame.MaxWindowSize || f.avail != h2frame.MaxWindowSize {
		t.Fatalf("widen overflow: inc=%d avail=%d", inc, f.avail)
	}
}

func TestBDPEstimator(t *testing.T) {
	b := bdpEstimator{window: 1 << 16, limit: 1 << 20}
	t0 := time.Unix(1000, 0)
	// Small RPCs: no ping before a window's worth arrived.
	for i := range 10 {
		if b.onData(1000, t0.Add(time.Duration(i)*time.Millisecond)) {
			t.Fatal("pinged before a window's worth of data")
		}
	}
	// A window's worth: sample starts.
	if !b.onData(1<<16, t0.Add(20*time.Millisecond)) {
		t.Fatal("no sample after a window's worth")
	}
	if b.onData(1<<16, t0.Add(21*time.Millisecond)) {
		t.Fatal("second ping while one is outstanding")
	}
	// The whole window arrived within one RTT: grow to twice the sample.
	w := b.onAck(t0.Add(70 * time.Millisecond))
	if w != 1<<17 {
		t.Fatalf("grown window %d", w)
	}
	// Rate limit: not again right away even with lots of data.
	if b.onData(1<<20, t0.Add(80*time.Millisecond)) {
		t.Fatal("sampled again within the minimum interval")
	}
	// A sample that did not fill the window does not grow it.
	if !b.onData(1<<18, t0.Add(2*time.Second)) {
		t.Fatal("no sample after the interval")
	}
	b.onData(1000, t0.Add(2*time.Second+time.Millisecond))
	if w := b.onAck(t0.Add(2*time.Second + 50*time.Millisecond)); w != 0 {
		t.Fatalf("grew to %d on a small sample", w)
	}
	// At the limit: never samples again.
	b.window = b.limit
	if b.onData(1<<30, t0.Add(time.Hour)) {
		t.Fatal("sampled at the limit")
	}
}
