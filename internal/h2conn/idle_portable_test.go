//go:build !linux || leangrpcportable

package h2conn

import (
	"runtime"
	"testing"
	"time"
)

// On the portable path an idle connection keeps its reader goroutine,
// parked in Read, on each side, and the one read buffer that reader holds
// (idle_linux_test.go has the Linux fast path, which keeps neither). The
// connection still serves calls after idling, and Close of an idle
// connection ends both sides and returns every goroutine and buffer.
func TestIdlePortableKeepsReaders(t *testing.T) {
	g := settledGoroutines()
	p, ended := newAsyncPair(t, Config{}, Config{})
	roundTrip(t, p.client, p.pool, []byte("x"))
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > g+2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // past the idle wait a fast-path reader would leave after
	if n := runtime.NumGoroutine() - g; n != 2 {
		t.Fatalf("%d goroutines for an idle connection pair, want 2 (a reader on each side)", n)
	}
	if out := p.pool.Outstanding(); out > 2 {
		t.Fatalf("%d pooled buffers out on an idle pair, want at most one read buffer per side", out)
	}
	if got := roundTrip(t, p.client, p.pool, []byte("again")); string(got) != "again" {
		t.Fatalf("round trip after idle: %q", got)
	}
	p.client.Close()
	select {
	case <-ended:
	case <-time.After(3 * time.Second):
		t.Fatal("server onEnd did not run after the idle client closed")
	}
	<-p.client.Done()
	checkLeaks(t, p.pool, g)
}
