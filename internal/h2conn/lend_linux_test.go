//go:build linux && !leangrpcportable

package h2conn

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
)

// Lending the read role needs a bounded wait for bytes (sockio's
// ReadReadyWithin and FlushReadyWithin), which only the Linux fast path
// has; these tests check that lending happens. The ones in lend_test.go
// check behaviour that holds on every path.

// A lone client lends its read role after each call (lend.go): nobody reads
// its socket until the next call waits for a response. Frames the server
// sends meanwhile must still be handled: here a GOAWAY, which the watcher's
// reader finds. Without the watcher the client would learn of it only at
// its next call.
func TestLentRoleSeesGoAway(t *testing.T) {
	p, g := newLendingPair(t)
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

// A server's reader waits for the next request from inside the flush of
// an inline handler's response (flushReaderLocked), a wait that cannot see
// bytes which came during the handler: here a second call's request. The
// wait ends at its bound, the request is read then, and the connection
// stops waiting that way. The watcher is paused so that the first call's
// role stays lent while it blocks.
func TestInlineFlushWaitLostEdge(t *testing.T) {
	shareForTest(t)
	if err := sockio.StartIdlePoller(); err != nil {
		t.Skip("no idle poller:", err)
	}
	g := runtime.NumGoroutine()
	pool := bufpool.New(nil)
	cn, sn := h2test.TCPPair(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	server := NewServerConn(sn, Config{Pool: pool, PooledReads: true}, inlineEchoHandler(pool, started, release))
	ended := make(chan struct{})
	go server.ServeAsync(func() { close(ended) })
	client, err := NewClientConn(cn, Config{Pool: pool, PooledReads: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // inline calls, each answered from a flush-wait
		if got := roundTrip(t, client, pool, []byte("warm")); string(got) != "warm" {
			t.Fatalf("echo %q", got)
		}
	}
	if v := server.lendState.Load(); v&lendNoFlushWait != 0 {
		t.Fatalf("the server stopped its flush-waits on lone calls (state %#x)", v)
	}

	lendWatchPaused.Store(true)
	defer lendWatchPaused.Store(false)
	// Held HEADERS: the request leaves in one write, so that it arrives
	// whole and its handler runs inline.
	a, err := client.NewStreamHold(context.Background(), reqFields("/block"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WriteData(pool.Copy([]byte("A")), true); err != nil {
		t.Fatal(err)
	}
	<-started // A's handler runs on the server's reader, its role lent
	b, err := client.NewStream(context.Background(), reqFields("/echo"), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WriteData(pool.Copy([]byte("B")), true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // B's request is in the server's socket
	close(release)
	if got := recvEcho(t, a); string(got) != "A" {
		t.Fatalf("A: %q", got)
	}
	if got := recvEcho(t, b); string(got) != "B" {
		t.Fatalf("B: %q", got)
	}
	a.Release()
	b.Release()
	if v := server.lendState.Load(); v&lendNoFlushWait == 0 {
		t.Fatalf("the flush-wait that missed B's request did not turn itself off (state %#x)", v)
	}
	client.Close()
	<-ended
	checkLeaks(t, pool, g)
}

// slowEchoHandler is echoHandler that answers a payload of "slow" after
// 5 ms, longer than a lent role's bounded wait.
func slowEchoHandler(pool *bufpool.Pool) Handler {
	return HandlerFunc(func(s *Stream) {
		go func() {
			got, err := recvAll(s)
			if err != nil {
				return
			}
			if string(got) == "slow" {
				time.Sleep(5 * time.Millisecond)
			}
			if s.WriteHeaders(respFields, false) != nil || s.WriteData(pool.Copy(got), false) != nil {
				return
			}
			s.WriteTrailers(trailerFields)
		}()
	})
}

// A lone client whose caller waited for an answer past the bound of its
// read (callerReadWait) reads the usual way for lendCoolBatches batches,
// with a reader goroutine that does not lend its role, and then lends
// again.
func TestLendCoolsDownAfterSlowAnswer(t *testing.T) {
	shareForTest(t)
	sockio.StartIdlePoller() // a process-wide goroutine, before the baseline
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, slowEchoHandler, true)
	cool := func() uint8 {
		p.client.mu.Lock()
		defer p.client.mu.Unlock()
		return p.client.lendCool
	}
	// Fast calls; on a loaded machine one may still outlast the bound and
	// start a cool-down, which the calls after it count down, or the
	// watcher may hand the role to a reader goroutine. The slow call must
	// find the role lent, so that its caller is the one that waits: the
	// watcher is paused from the last fast call to the slow one's end.
	lendWatchPaused.Store(true)
	defer lendWatchPaused.Store(false)
	for i := 0; i < 3 || cool() != 0 || p.client.lendState.Load()&lendKinds != lendFree; i++ {
		if i == 300 {
			t.Fatalf("still cooling (%d) or not lent (state %#x) after %d answers", cool(), p.client.lendState.Load(), i)
		}
		roundTrip(t, p.client, p.pool, []byte("x"))
	}
	if got := roundTrip(t, p.client, p.pool, []byte("slow")); string(got) != "slow" {
		t.Fatalf("echo %q", got)
	}
	lendWatchPaused.Store(false)
	if n := cool(); n == 0 || n > lendCoolBatches {
		t.Fatalf("after an answer slower than the bound: cooling %d, want 1..%d", n, lendCoolBatches)
	}
	// Each fast call is one batch for the reader goroutine, which counts
	// the cool-down down instead of lending.
	lentAgain := false
	for i := 0; i < 300 && !lentAgain; i++ {
		roundTrip(t, p.client, p.pool, []byte("x"))
		lentAgain = cool() == 0 && p.client.lendState.Load()&lendKinds == lendFree
	}
	if !lentAgain {
		t.Fatalf("the client did not lend its role again after the cool-down (cooling %d, state %#x)", cool(), p.client.lendState.Load())
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}
