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
	// The peer is out of window: even a small credit goes out at once.
	if inc := f.credit(10, 1000); inc != 10 {
		t.Fatalf("credit to a stalled peer sent %d, want 10", inc)
	}
	f.init(1000)
	f.take(100)
	// Batched: nothing until a quarter of the window is owed.
	if inc := f.credit(100, 1000); inc != 0 {
		t.Fatalf("credit 100/1000 sent %d", inc)
	}
	if inc := f.credit(150, 1000); inc != 250 {
		t.Fatalf("credit to 250/1000 sent %d, want 250", inc)
	}
	if f.avail != 1150 || f.unsent != 0 {
		t.Fatalf("after update avail=%d unsent=%d", f.avail, f.unsent)
	}
	// widen opens the window for a whole message at once.
	if inc := f.widen(5000); inc != 3850 || f.avail != 5000 {
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
	b := bdpEstimator{window: 1 << 16, limit: 1 << 18}
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	// Small RPCs: nothing until a window's worth arrived.
	for range 60 {
		now = now.Add(time.Millisecond)
		if ping, grown := b.onData(1000, clock); ping || grown != 0 {
			t.Fatal("pinged or grew before a window's worth of data")
		}
	}
	// A window's worth: the first PING (no RTT known yet, no growth).
	if ping, grown := b.onData(1<<16, clock); !ping || grown != 0 {
		t.Fatalf("after a window: ping=%v grown=%d", ping, grown)
	}
	now = now.Add(10 * time.Millisecond)
	b.onAck(now)
	if b.rtt != 10*time.Millisecond {
		t.Fatalf("rtt %v", b.rtt)
	}
	// The next window arrives within two RTTs: window-limited, it doubles.
	now = now.Add(5 * time.Millisecond)
	ping, grown := b.onData(1<<16, clock)
	if grown != 1<<17 {
		t.Fatalf("grown = %d, want %d", grown, 1<<17)
	}
	if ping {
		t.Fatal("pinged again within the minimum interval")
	}
	// A window that takes longer than two RTTs: the link is the limit.
	now = now.Add(100 * time.Millisecond)
	if _, grown := b.onData(1<<17, clock); grown != 0 {
		t.Fatalf("grew to %d on a slow window", grown)
	}
	// Growth stops at the limit; at the limit nothing is sampled.
	now = now.Add(time.Millisecond)
	if _, grown := b.onData(1<<17, clock); grown != 1<<18 {
		t.Fatalf("grown = %d, want the limit", grown)
	}
	if ping, grown := b.onData(1<<30, clock); ping || grown != 0 {
		t.Fatal("sampled at the limit")
	}
}
