//go:build linux && !leangrpcportable

package h2conn

import (
	"context"
	"net"
	"reflect"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"golang.org/x/sys/unix"
)

// Idle connections on the Linux fast path: the reader hands the socket to
// sockio's idle poller and returns, so an idle connection runs no
// goroutine and holds no read buffer (idle_portable_test.go has what the
// portable path gives instead).

// An idle connection costs no goroutine on the client (its reader leaves
// for OnReadable) and holds no writer goroutine; the server's synchronous
// Serve keeps its caller's.
func TestIdleGoroutines(t *testing.T) {
	if err := sockio.StartIdlePoller(); err != nil {
		t.Skip("no idle poller:", err)
	}
	g := settledGoroutines()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, true)
	roundTrip(t, p.client, p.pool, []byte("x"))
	waitGoroutines(t, g+1) // the Serve goroutine (the test's)
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// waitIdleReaders waits until at most n goroutines run and no goroutine
// holds the read role of conns: no caller reads for itself (reader.go), so
// no reader runs either.
func waitIdleReaders(t *testing.T, n int, conns ...*Conn) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		idle := runtime.NumGoroutine() <= n
		for _, c := range conns {
			idle = idle && c.readRole.Load()&roleHolder == roleReader
		}
		if idle {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, want at most %d, with no read role held\n%s", runtime.NumGoroutine(), n, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitAwaitsReadable waits until the reader of each of conns has armed
// sockio's OnReadable and returned (goIdle): no goroutine uses their frame
// readers then, and arming came after the reader's last Unlock of mu.
func waitAwaitsReadable(t *testing.T, conns ...*Conn) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for _, c := range conns {
		ar, ok := c.nc.(interface{ AwaitsReadable() bool })
		if !ok {
			t.Fatalf("%v: %T has no idle wait", c.role, c.nc)
		}
		for !ar.AwaitsReadable() {
			if time.Now().After(deadline) {
				t.Fatalf("%v: the reader did not go idle", c.role)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// With ServeAsync an idle connection pair runs no goroutine and holds no
// pooled buffer; it wakes up for the next request, and Close of an idle
// connection ends both sides and runs onEnd.
func TestIdleAsyncNoGoroutine(t *testing.T) {
	if err := sockio.StartIdlePoller(); err != nil {
		t.Skip("no idle poller:", err)
	}
	g := settledGoroutines()
	p, ended := newAsyncPair(t, Config{}, Config{})
	roundTrip(t, p.client, p.pool, []byte("x"))
	waitGoroutines(t, g)
	if out := p.pool.Outstanding(); out != 0 {
		t.Fatalf("%d pooled buffers out on an idle pair, want 0", out)
	}
	for _, c := range []*Conn{p.client, p.server} {
		// A role just offered has no goroutine either: the watcher gives
		// it to a reader within a tick, which trims the connection when
		// it parks after its idle wait.
		var nf, cc int
		var sm map[uint32]*Stream
		var st *time.Timer
		for deadline := time.Now().Add(2 * time.Second); ; {
			c.mu.Lock()
			nf, sm, cc, st = len(c.freeStreams), c.streams, cap(c.ctrl), c.timers.settings
			c.mu.Unlock()
			if nf == 0 && sm == nil && cc == 0 && st == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if nf != 0 || sm != nil || cc != 0 || st != nil {
			t.Errorf("%v idle: %d free streams, streams map %v, ctrl cap %d, settings timer %v; want all dropped", c.role, nf, sm, cc, st)
		}
		if n := c.notify; n != nil && (n.done != nil || n.goingAway != nil) {
			t.Errorf("%v made its Done or GoingAway channel before anyone asked", c.role)
		}
	}
	for i := range 3 {
		if got := roundTrip(t, p.client, p.pool, []byte("again")); string(got) != "again" {
			t.Fatalf("round trip %d after idle: %q", i, got)
		}
		waitGoroutines(t, g)
	}
	// Each side came back from idle at least three times, so it waits
	// longer before parking: a connection in use keeps its reader.
	for _, c := range []*Conn{p.client, p.server} {
		c.mu.Lock()
		w := c.idleWait()
		c.mu.Unlock()
		if w < 8*minIdleReadWait || w > idleReadWait {
			t.Errorf("%v idle wait after three resumes: %v, want between %v and %v", c.role, w, 8*minIdleReadWait, idleReadWait)
		}
	}
	select {
	case <-ended:
		t.Fatal("onEnd ran before the connection ended")
	default:
	}
	p.server.Close()
	select {
	case <-ended:
	case <-time.After(3 * time.Second):
		t.Fatal("onEnd did not run after Close of an idle server conn")
	}
	select {
	case <-p.client.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("idle client did not see the server's close")
	}
	if !p.client.Ended() || !p.client.IsGoingAway() || !p.server.Ended() {
		t.Errorf("after the end: client Ended %v, IsGoingAway %v; server Ended %v", p.client.Ended(), p.client.IsGoingAway(), p.server.Ended())
	}
	p.client.Close()
	checkLeaks(t, p.pool, g)
}

// Close of an idle client ends its parked reader and the server.
func TestIdleClientClose(t *testing.T) {
	if err := sockio.StartIdlePoller(); err != nil {
		t.Skip("no idle poller:", err)
	}
	g := runtime.NumGoroutine()
	p, ended := newAsyncPair(t, Config{}, Config{})
	roundTrip(t, p.client, p.pool, []byte("x"))
	waitGoroutines(t, g)
	p.client.Close()
	select {
	case <-p.client.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("Close of an idle client: Done not closed")
	}
	select {
	case <-ended:
	case <-time.After(3 * time.Second):
		t.Fatal("server onEnd did not run after the client closed")
	}
	checkLeaks(t, p.pool, g)
}

// TestIdleWithOpenStreamsHoldsNothing checks a connection that goes idle
// with streams open (two calls waiting for messages, as watch streams do):
// its reader, which waits for bytes in sockio's ReadEach once more than one
// stream is open, leaves after the idle wait holding no read buffer and no
// frame scratch, on both sides.
func TestIdleWithOpenStreamsHoldsNothing(t *testing.T) {
	if err := sockio.StartIdlePoller(); err != nil {
		t.Skip("no idle poller:", err)
	}
	g := settledGoroutines()
	p, ended := newAsyncPair(t, Config{}, Config{})
	var streams []*Stream
	for range 2 {
		s, err := p.client.NewStream(context.Background(), reqFields("/watch"), StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A message each way, so that both readers see both streams.
		if err := s.Send(DataItem(p.pool.Copy([]byte("hello")), false)); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	// The server's echo handlers wait for the ends of the requests: two
	// goroutines, and no reader on either side once both went idle. (A
	// handler may read for itself for a while first, reader.go: the role is
	// then roleTaken, and the reader it hands over to goes idle in turn.)
	waitIdleReaders(t, g+2, p.client, p.server)
	// The goroutine count can reach its mark while a reader still runs
	// (one counted in g may have ended meanwhile): wait for both readers
	// to have handed their sockets to the idle poller.
	waitAwaitsReadable(t, p.client, p.server)
	for _, c := range []*Conn{p.client, p.server} {
		c.mu.Lock() // the gone reader's last use of fr came before its last Unlock
		rb, sc := readerHolds(t, c.fr)
		c.mu.Unlock()
		if rb || sc {
			t.Errorf("%v idle with two streams open: holds a read buffer %v, frame scratch %v", c.role, rb, sc)
		}
	}
	// And they come back: the requests end, the echoes arrive.
	for _, s := range streams {
		if err := s.Send(DataItem(p.pool.Copy([]byte("!")), true)); err != nil {
			t.Fatal(err)
		}
		if got := recvEcho(t, s); string(got) != "hello!" {
			t.Fatalf("echo after idle: %q", got)
		}
		s.Release()
	}
	p.client.Close()
	p.server.Close()
	<-ended
	<-p.client.Done()
	checkLeaks(t, p.pool, g)
}

// readerHolds reports whether fr holds a pooled read buffer and its frame
// scratch. h2frame exports no such query (its own tests have one), so it
// looks at the Reader's fields: frames, nil while nothing is held, and
// the read buffer inside it.
func readerHolds(t *testing.T, fr *h2frame.Reader) (readBuffer, scratch bool) {
	t.Helper()
	frames := reflect.ValueOf(fr).Elem().FieldByName("frames")
	if !frames.IsValid() || frames.Kind() != reflect.Pointer {
		t.Fatal("h2frame.Reader has no frames pointer: update readerHolds")
	}
	if frames.IsNil() {
		return false, false
	}
	rbuf := frames.Elem().FieldByName("rbuf")
	if !rbuf.IsValid() || rbuf.Kind() != reflect.Pointer {
		t.Fatal("h2frame's frames has no rbuf pointer: update readerHolds")
	}
	return !rbuf.IsNil(), true
}

// stalledHeaderServer serves one connection with ServeAsync and greets it
// from a raw peer, which then sends the first 3 bytes of a PING's header
// and nothing more. It waits until the server read them and its reader
// went idle (at most g goroutines), checks that it holds nothing but
// those bytes, and returns the peer, the PING's bytes and the channel
// closed by onEnd.
func stalledHeaderServer(t *testing.T, g int, pool *bufpool.Pool, cfg Config) (*h2test.Peer, []byte, chan struct{}) {
	t.Helper()
	cn, sn := h2test.TCPPair(t)
	cfg.Pool, cfg.PooledReads = pool, true
	server := NewServerConn(sn, cfg, echoHandler(t, pool))
	ended := make(chan struct{})
	go server.ServeAsync(func() { close(ended) })
	peer := h2test.NewPeer(t, cn, h2test.ClientRole)
	peer.Greet()
	ping := h2test.AppendFrame(nil, h2frame.TypePing, 0, 0, []byte("stalled!"))
	peer.WriteBytes(ping[:3])
	waitDrained(t, sn)
	// The bytes left the socket, so a reader took them: an idle wait armed
	// from now on is that reader's, and what it left is ordered before
	// AwaitsReadable.
	waitGoroutines(t, g)
	waitAwaitsReadable(t, server)
	kept := len(server.src.header)
	rb, sc := readerHolds(t, server.fr)
	// Still idle: what was read above came before anything that wakes the
	// reader (ordered by the idle poller's lock).
	waitAwaitsReadable(t, server)
	if kept != 3 {
		t.Fatalf("the idle server keeps %d bytes of the header, want 3", kept)
	}
	if rb || sc || pool.Outstanding() != 0 {
		t.Errorf("stalled inside a header: holds a read buffer %v, frame scratch %v, %d pool buffers", rb, sc, pool.Outstanding())
	}
	return peer, ping, ended
}

// waitDrained waits until nc's receive queue is empty.
func waitDrained(t *testing.T, nc net.Conn) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := queuedBytes(t, nc)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still unread after 5s", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// queuedBytes returns how many bytes wait in nc's receive queue.
func queuedBytes(t *testing.T, nc net.Conn) int {
	t.Helper()
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if cerr := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A server whose peer stops inside a frame header waits for the rest as an
// idle connection waits for its next frame: no goroutine, no read buffer,
// no frame scratch, only the header's bytes so far. The rest brings the
// frame, which is answered.
func TestIdleInsideFrameHeader(t *testing.T) {
	if err := sockio.StartIdlePoller(); err != nil {
		t.Skip("no idle poller:", err)
	}
	g := settledGoroutines()
	pool := bufpool.New(nil)
	peer, ping, ended := stalledHeaderServer(t, g, pool, Config{FrameStallTimeout: time.Minute})
	// The rest comes in two parts: the header's, which leaves the reader
	// inside it again, and then the payload.
	peer.WriteBytes(ping[3:7])
	time.Sleep(20 * time.Millisecond)
	peer.WriteBytes(ping[7:])
	peer.WantPingAck([8]byte([]byte("stalled!")))
	// And the connection goes on: a request is answered.
	peer.WriteHeaderFields(1, false, reqFields("/echo"))
	peer.WriteData(1, true, []byte("after"))
	if h := peer.WantHeaders(1); h.Get(":status") != "200" {
		t.Fatalf("status %q", h.Get(":status"))
	}
	if body, _ := peer.WantBodyTrailers(1, true); string(body) != "after" {
		t.Fatalf("echo %q", body)
	}
	peer.Close()
	<-ended
	checkLeaks(t, pool, g)
}

// A peer that never completes the header is still bounded while the
// server waits for it idle: the connection ends with GOAWAY
// ENHANCE_YOUR_CALM after FrameStallTimeout.
func TestIdleInsideFrameHeaderStall(t *testing.T) {
	if err := sockio.StartIdlePoller(); err != nil {
		t.Skip("no idle poller:", err)
	}
	g := settledGoroutines()
	pool := bufpool.New(nil)
	const bound = 200 * time.Millisecond
	start := time.Now()
	peer, _, ended := stalledHeaderServer(t, g, pool, Config{FrameStallTimeout: bound})
	f := peer.WantGoAway(h2frame.ErrCodeEnhanceYourCalm)
	if took := time.Since(start); took < bound {
		t.Errorf("closed %v after the stall began, before the bound of %v", took, bound)
	}
	if got := string(f.DebugData()); got != "stalled_in_frame" {
		t.Errorf("GOAWAY debug data %q, want stalled_in_frame", got)
	}
	select {
	case <-ended:
	case <-time.After(3 * time.Second):
		t.Fatal("the stalled connection did not end")
	}
	peer.Close()
	checkLeaks(t, pool, g)
}
