package h2conn

import (
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// A lone client lends its read role after each call (lend.go): nobody reads
// its socket until the next call waits for a response. Frames the server
// sends meanwhile must still be handled: here a GOAWAY, which the watcher's
// reader finds. Without the watcher the client would learn of it only at
// its next call.
func TestLentRoleSeesGoAway(t *testing.T) {
	shareForTest(t)
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, true)
	for range 3 {
		roundTrip(t, p.client, p.pool, []byte("x"))
	}
	if v := p.client.lendState.Load(); v&lendWatched == 0 {
		t.Fatalf("the client never lent its role (state %#x)", v)
	}
	p.server.GoAway(h2frame.ErrCodeNo, "bye")
	select {
	case <-p.client.GoingAway():
	case <-time.After(5 * time.Second):
		t.Fatalf("the client did not see the server's GOAWAY (role state %#x)", p.client.lendState.Load())
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// Close of a client whose role is lent ends the connection at once: Close
// starts a reader, which finds the closed socket and finishes.
func TestLentRoleClose(t *testing.T) {
	shareForTest(t)
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, true)
	roundTrip(t, p.client, p.pool, []byte("x"))
	p.client.Close()
	select {
	case <-p.client.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Close of a lent client did not end it")
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// The caller that reads for itself dispatches whatever the batch holds, and
// hands the role to a reader goroutine once more than one stream is open:
// many calls on one connection from several goroutines all complete, with
// nothing left behind.
func TestLentRoleConcurrentCallers(t *testing.T) {
	shareForTest(t)
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, true)
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				// One goroutine calls alone now and then: the role goes
				// back and forth between lent and a reader goroutine.
				if w > 0 && i%50 == 0 {
					time.Sleep(3 * time.Millisecond)
				}
				msg := []byte{byte(w), byte(i)}
				if got := roundTrip(t, p.client, p.pool, msg); string(got) != string(msg) {
					t.Errorf("worker %d call %d: got %q", w, i, got)
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// shareForTest turns on the shared timers, and with them lending, for one
// test: this package's binary runs with them off (sharedtimer_test.go).
func shareForTest(t *testing.T) {
	if !shareTimers {
		shareTimers = true
		t.Cleanup(func() { shareTimers = false })
	}
}
