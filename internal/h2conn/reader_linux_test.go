//go:build linux && !leangrpcportable

package h2conn

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
)

// Offering the read role needs a bounded wait for bytes (sockio's
// ReadReadyWithin and FlushReadyWithin), which only the Linux fast path
// has; these tests check that offers happen. The ones in reader_test.go
// check behaviour that holds on every path.

// A lone client offers its read role after each call (reader.go): nobody reads
// its socket until the next call waits for a response. Frames the server
// sends meanwhile must still be handled: here a GOAWAY, which the watcher's
// reader finds. Without the watcher the client would learn of it only at
// its next call.
func TestOfferedRoleSeesGoAway(t *testing.T) {
	p, g := newOfferingPair(t)
	// A call offers the role once its response is read; on a loaded
	// machine the reader goroutine may have read it first, so a few
	// calls can pass without an offer. Fifty cannot.
	for i := 0; i < 50 && (i < 3 || p.client.readRole.Load()&roleWatched == 0); i++ {
		roundTrip(t, p.client, p.pool, []byte("x"))
	}
	if v := p.client.readRole.Load(); v&roleWatched == 0 {
		t.Fatalf("the client never offered its role (state %#x)", v)
	}
	p.server.GoAway(h2frame.ErrCodeNo, "bye")
	select {
	case <-p.client.GoingAway():
	case <-time.After(5 * time.Second):
		t.Fatalf("the client did not see the server's GOAWAY (role state %#x)", p.client.readRole.Load())
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// A server's reader waits for the next request from inside the flush of
// an inline handler's response (flushWaitLocked), a wait that cannot see
// bytes which came during the handler: here a second call's request. The
// wait ends at its bound, the request is read then, and the connection
// stops waiting that way. The handler returns as soon as the second
// request is in the server's socket, within the watcher's tick; should the
// watcher still hand the role to a reader goroutine first (a loaded
// machine), which reads the request the usual way, the test tries again on
// a new connection. So it does when the flush-wait sees the request after
// all (the runtime had not taken the socket's edge yet). Under -race a
// connection shows the lost edge about one time in three, fewer on a
// machine busy elsewhere; 100 connections of a few milliseconds each leave
// that no real chance of failing the test, while an engine that never
// turns its flush-waits off still fails it.
func TestInlineFlushWaitLostEdge(t *testing.T) {
	if err := sockio.StartIdlePoller(); err != nil {
		t.Skip("no idle poller:", err)
	}
	StartRoleWatcher()
	for attempt := 1; ; attempt++ {
		if inlineFlushWaitLosesEdge(t) {
			return
		}
		if attempt == 100 {
			t.Fatalf("after %d connections, no flush-wait that missed a request turned itself off", attempt)
		}
	}
}

// inlineFlushWaitLosesEdge runs TestInlineFlushWaitLostEdge's calls on a
// new connection, and reports whether the server stopped its flush-waits.
func inlineFlushWaitLosesEdge(t *testing.T) bool {
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
	if v := server.readRole.Load(); v&roleNoFlushWait != 0 {
		// A flush-wait that ended at its bound as the next request came
		// (a loaded machine): nothing to see on this connection.
		t.Logf("the server stopped its flush-waits on lone calls (state %#x)", v)
		client.Close()
		<-ended
		checkLeaks(t, pool, g)
		return false
	}

	// Held HEADERS: the request leaves in one write, so that it arrives
	// whole and its handler runs inline.
	a, err := client.NewStream(context.Background(), reqFields("/block"), StreamOptions{Unary: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(DataItem(pool.Copy([]byte("A")), true)); err != nil {
		t.Fatal(err)
	}
	<-started // A's handler runs on the server's reader, its role offered
	b, err := client.NewStream(context.Background(), reqFields("/echo"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Send(DataItem(pool.Copy([]byte("B")), true)); err != nil {
		t.Fatal(err)
	}
	// B's request is in the server's socket, or a reader goroutine the
	// watcher started has read it already: then this connection has
	// nothing to show (lost stays false below).
	waitReceived(t, sn, server)
	// A moment asleep lets the runtime poll the network, which takes the
	// socket's readiness edge: the flush-wait cannot see it then.
	time.Sleep(100 * time.Microsecond)
	close(release)
	if got := recvEcho(t, a); string(got) != "A" {
		t.Fatalf("A: %q", got)
	}
	if got := recvEcho(t, b); string(got) != "B" {
		t.Fatalf("B: %q", got)
	}
	a.Release()
	b.Release()
	lost := server.readRole.Load()&roleNoFlushWait != 0
	client.Close()
	<-ended
	checkLeaks(t, pool, g)
	return lost
}

// waitReceived waits until bytes wait to be read in nc's receive queue,
// or until server's read role is no longer offered to its inline handler.
// In the second case the watcher gave the role to a reader goroutine (the
// handler outlived a tick), which takes any bytes as they come: the
// receive queue may then never be seen holding them.
func waitReceived(t *testing.T, nc net.Conn, server *Conn) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if queuedBytes(t, nc) > 0 || server.roleState().holder() != roleOfferedInline {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no bytes came to the socket within 5s")
		}
		runtime.Gosched()
	}
}

// slowEchoHandler is echoHandler that answers a payload of "slow" after
// 5 ms, longer than an offered role's bounded wait.
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
			if s.Send(HeadersItem(respFields, false)) != nil || s.Send(DataItem(pool.Copy(got), false)) != nil {
				return
			}
			s.Send(TrailersItem(trailerFields))
		}()
	})
}

// A lone client whose caller waited for an answer past the bound of its
// read (callerReadWait) reads the usual way for noOfferBatches batches,
// with a reader goroutine that does not offer its role, and then offers
// again.
func TestOffersPauseAfterSlowAnswer(t *testing.T) {
	sockio.StartIdlePoller() // a process-wide goroutine, before the baseline
	StartRoleWatcher()
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, slowEchoHandler, true)
	paused := func() uint8 {
		p.client.mu.Lock()
		defer p.client.mu.Unlock()
		return p.client.noOfferLeft
	}
	offered := func() bool { return p.client.readRole.Load()&roleHolder == roleOffered }
	// The slow call must find the role offered, so that its caller is the
	// one that waits past the bound. Fast calls until the role is offered
	// and offers are not paused (on a loaded machine one may outlast the
	// bound and start one, which the calls after it count down); should
	// the watcher hand the role to a reader goroutine before the slow call
	// takes it, its answer pauses no offers and the test tries again.
	for attempt := 1; ; attempt++ {
		for i := 0; paused() != 0 || !offered(); i++ {
			if i == 300 {
				t.Fatalf("still cooling (%d) or not lent (state %#x) after %d answers", paused(), p.client.readRole.Load(), i)
			}
			roundTrip(t, p.client, p.pool, []byte("x"))
		}
		if got := roundTrip(t, p.client, p.pool, []byte("slow")); string(got) != "slow" {
			t.Fatalf("echo %q", got)
		}
		if paused() != 0 {
			break
		}
		if attempt == 100 {
			t.Fatalf("after %d answers slower than the bound, no pause of offers", attempt)
		}
	}
	if n := paused(); n > noOfferBatches {
		t.Fatalf("after an answer slower than the bound: offers paused for %d batches, want 1..%d", n, noOfferBatches)
	}
	// Each fast call is one batch for the reader goroutine, which counts
	// the pause down instead of offering.
	lentAgain := false
	for i := 0; i < 300 && !lentAgain; i++ {
		roundTrip(t, p.client, p.pool, []byte("x"))
		lentAgain = paused() == 0 && offered()
	}
	if !lentAgain {
		t.Fatalf("the client did not offer its role again after the pause (paused %d, state %#x)", paused(), p.client.readRole.Load())
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}
