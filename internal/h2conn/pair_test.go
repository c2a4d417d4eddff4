package h2conn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

func reqFields(path string) []hpack.HeaderField {
	return []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path},
		{Name: ":authority", Value: "test"},
		{Name: "content-type", Value: "application/grpc"},
	}
}

var (
	respFields    = []hpack.HeaderField{{Name: ":status", Value: "200"}}
	trailerFields = []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}
)

// echoHandler answers each stream with the bytes it received, then
// trailers.
func echoHandler(t testing.TB, pool *bufpool.Pool) Handler {
	return HandlerFunc(func(s *Stream) {
		go func() {
			got, err := recvAll(s)
			if err != nil {
				return
			}
			if err := s.Send(HeadersItem(respFields, false)); err != nil {
				return
			}
			if len(got) > 0 {
				if err := s.Send(DataItem(pool.Copy(got), false)); err != nil {
					return
				}
			}
			s.Send(TrailersItem(trailerFields))
		}()
	})
}

type pair struct {
	client, server *Conn
	serveErr       chan error
	pool           *bufpool.Pool
}

func newPair(t testing.TB, ccfg, scfg Config, h func(pool *bufpool.Pool) Handler, tcp bool) *pair {
	t.Helper()
	pool := bufpool.New(nil)
	ccfg.Pool, scfg.Pool = pool, pool
	var cn, sn net.Conn
	if tcp {
		cn, sn = h2test.TCPPair(t)
		scfg.PooledReads, ccfg.PooledReads = true, true
	} else {
		cn, sn = net.Pipe()
	}
	p := &pair{pool: pool, serveErr: make(chan error, 1)}
	p.server = NewServerConn(sn, scfg, h(pool))
	go func() { p.serveErr <- p.server.Serve() }()
	var err error
	p.client, err = NewClientConn(cn, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pair) close(t testing.TB) {
	t.Helper()
	p.client.Close()
	p.server.Close()
	<-p.client.Done()
	<-p.server.Done()
	<-p.serveErr
}

// checkLeaks waits for goroutines and pooled buffers to return to baseline.
func checkLeaks(t testing.TB, pool *bufpool.Pool, goroutines int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		n := runtime.NumGoroutine()
		out := pool.Outstanding()
		if n <= goroutines && out == 0 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("leak: goroutines %d (baseline %d), outstanding buffers %d\n%s", n, goroutines, out, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func roundTrip(t testing.TB, c *Conn, pool *bufpool.Pool, payload []byte) []byte {
	t.Helper()
	s, got := echoExchange(t, c, pool, payload)
	defer s.Release()
	if tr := s.Trailers(); len(tr) != 1 || tr[0].Value != "0" {
		t.Fatalf("trailers %v", tr)
	}
	return got
}

// echoExchange sends payload to /echo and reads the response to its end;
// it returns the stream, not released, and the bytes received.
func echoExchange(t testing.TB, c *Conn, pool *bufpool.Pool, payload []byte) (*Stream, []byte) {
	t.Helper()
	s, err := c.NewStream(context.Background(), reqFields("/echo"), StreamOptions{})
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	if err := s.Send(DataItem(pool.Copy(payload), true)); err != nil {
		t.Fatalf("WriteData: %v", err)
	}
	return s, recvEcho(t, s)
}

// recvEcho reads echoHandler's response on s: a 200 and the body to its
// end, which it returns.
func recvEcho(t testing.TB, s *Stream) []byte {
	t.Helper()
	h, end, err := s.RecvHeaders()
	if err != nil || end || len(h) == 0 || h[0].Value != "200" {
		t.Fatalf("RecvHeaders: %v %v %v", h, end, err)
	}
	got, err := recvAll(s)
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return got
}

// recvAll receives s's DATA to its end and returns the bytes, freeing
// each buffer; on an error it returns what came before it.
func recvAll(s *Stream) ([]byte, error) {
	var got []byte
	for {
		b, err := s.Recv()
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, b.Bytes()...)
		b.Free()
	}
}

func TestEcho(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		name := "pipe"
		if tcp {
			name = "tcp"
		}
		t.Run(name, func(t *testing.T) {
			g := runtime.NumGoroutine()
			p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, tcp)
			for _, n := range []int{1, 100, 16384, 16385, 100000} {
				payload := bytes.Repeat([]byte{byte(n)}, n)
				if got := roundTrip(t, p.client, p.pool, payload); !bytes.Equal(got, payload) {
					t.Fatalf("size %d: echo mismatch (got %d bytes)", n, len(got))
				}
			}
			p.close(t)
			checkLeaks(t, p.pool, g)
		})
	}
}

// A transfer larger than both windows must flow through WINDOW_UPDATEs.
func TestLargeTransferSmallWindows(t *testing.T) {
	g := runtime.NumGoroutine()
	cfg := Config{InitialStreamWindow: 65535, InitialConnWindow: 65535, DisableBDP: true}
	p := newPair(t, cfg, cfg, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	payload := make([]byte, 3<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	if got := roundTrip(t, p.client, p.pool, payload); !bytes.Equal(got, payload) {
		t.Fatalf("echo mismatch (got %d bytes)", len(got))
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// Many concurrent streams over a server limit of 4: the client queues.
func TestConcurrentStreamsQueue(t *testing.T) {
	g := runtime.NumGoroutine()
	var mu sync.Mutex
	peak := 0
	var server *Conn
	h := func(pool *bufpool.Pool) Handler {
		inner := echoHandler(t, pool)
		return HandlerFunc(func(s *Stream) {
			n := s.Conn().NumActiveStreams()
			mu.Lock()
			peak = max(peak, n)
			mu.Unlock()
			inner.HandleStream(s)
		})
	}
	p := newPair(t, Config{}, Config{MaxConcurrentStreams: 4}, h, true)
	server = p.server
	_ = server
	// Let the server's SETTINGS arrive so the client knows the limit.
	roundTrip(t, p.client, p.pool, []byte("warm"))
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := bytes.Repeat([]byte{byte(i)}, 1000*i+1)
			if got := roundTrip(t, p.client, p.pool, payload); !bytes.Equal(got, payload) {
				errs <- errors.New("mismatch")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mu.Lock()
	if peak > 4 || peak < 2 {
		t.Fatalf("server saw at most %d concurrent streams, limit 4", peak)
	}
	mu.Unlock()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

func TestResetByClient(t *testing.T) {
	g := runtime.NumGoroutine()
	gotErr := make(chan error, 1)
	h := func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) {
			go func() {
				for {
					b, err := s.Recv()
					if err != nil {
						gotErr <- err
						return
					}
					b.Free()
				}
			}()
		})
	}
	p := newPair(t, Config{}, Config{}, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(DataItem(p.pool.Copy([]byte("hello")), false)); err != nil {
		t.Fatal(err)
	}
	s.Reset(h2frame.ErrCodeCancel)
	err = <-gotErr
	var e *Error
	if !errors.As(err, &e) || e.Code != h2frame.ErrCodeCancel || e.Initiator != InitiatorPeer {
		t.Fatalf("server Recv error = %v, want CANCEL from peer", err)
	}
	if _, err := s.Recv(); !errors.As(err, &e) || e.Initiator != InitiatorUser {
		t.Fatalf("client Recv after Reset = %v", err)
	}
	if err := s.Send(DataItem(nil, true)); err == nil {
		t.Fatal("WriteData after Reset succeeded")
	}
	s.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

func TestGracefulShutdown(t *testing.T) {
	g := runtime.NumGoroutine()
	release := make(chan struct{})
	h := func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) {
			go func() {
				<-release
				echoHandler(t, pool).HandleStream(s)
			}()
		})
	}
	p := newPair(t, Config{}, Config{}, h, true)
	s, err := p.client.NewStream(context.Background(), reqFields("/slow"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the server has the stream.
	for p.server.NumActiveStreams() == 0 {
		time.Sleep(time.Millisecond)
	}
	p.server.GracefulShutdown()
	<-p.client.GoingAway()
	if _, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true}); !errors.Is(err, ErrGoingAway) {
		t.Fatalf("NewStream after GOAWAY: %v", err)
	}
	close(release)
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatalf("in-flight stream failed: %v", err)
	}
	for {
		b, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("in-flight stream failed: %v", err)
		}
		b.Free()
	}
	s.Release()
	select {
	case <-p.server.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server did not close after draining")
	}
	if err := <-p.serveErr; err != nil {
		t.Fatalf("Serve returned %v after a graceful shutdown", err)
	}
	<-p.client.Done()
	checkLeaks(t, p.pool, g)
}

func TestCloseFailsStreams(t *testing.T) {
	g := runtime.NumGoroutine()
	h := func(pool *bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) {}) }
	p := newPair(t, Config{}, Config{}, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Recv()
		done <- err
	}()
	p.client.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if _, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true}); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("NewStream after Close: %v", err)
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// countConn counts Write calls on a net.Conn.
type countConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
}

func (c *countConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *countConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// countedExchange is a client stream whose request ended and the server's
// side of it, over a pipe whose server end counts its writes, once the
// server's own SETTINGS, ACKs and WINDOW_UPDATE went out: a test writes a
// response on ss and compares cc.count() with before.
type countedExchange struct {
	pool     *bufpool.Pool
	cc       *countConn
	cl, srv  *Conn
	s, ss    *Stream
	serveErr chan error
	g        int
	before   int
}

func newCountedExchange(t *testing.T) *countedExchange {
	t.Helper()
	x := &countedExchange{g: runtime.NumGoroutine(), pool: bufpool.New(nil), serveErr: make(chan error, 1)}
	cn, sn := net.Pipe()
	x.cc = &countConn{Conn: sn}
	respond := make(chan *Stream, 1)
	x.srv = NewServerConn(x.cc, Config{Pool: x.pool}, HandlerFunc(func(s *Stream) { respond <- s }))
	go func() { x.serveErr <- x.srv.Serve() }()
	var err error
	if x.cl, err = NewClientConn(cn, Config{Pool: x.pool}); err != nil {
		t.Fatal(err)
	}
	if x.s, err = x.cl.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true}); err != nil {
		t.Fatal(err)
	}
	x.ss = <-respond
	time.Sleep(20 * time.Millisecond)
	x.before = x.cc.count()
	return x
}

// writes returns how many writes the server made since the exchange began.
func (x *countedExchange) writes() int { return x.cc.count() - x.before }

// recvResponse reads a 200, the message body (when not empty) and the end.
func (x *countedExchange) recvResponse(t *testing.T, body string) {
	t.Helper()
	h, _, err := x.s.RecvHeaders()
	if err != nil || len(h) == 0 || h[0].Value != "200" {
		t.Fatalf("RecvHeaders %v %v", h, err)
	}
	if body != "" {
		b, err := x.s.Recv()
		if err != nil || string(b.Bytes()) != body {
			t.Fatalf("Recv %v", err)
		}
		b.Free()
	}
	if _, err := x.s.Recv(); err != io.EOF {
		t.Fatalf("Recv end: %v", err)
	}
}

// close releases both streams, closes both connections and checks leaks.
func (x *countedExchange) close(t *testing.T) {
	t.Helper()
	x.s.Release()
	x.ss.Release()
	x.cl.Close()
	x.srv.Close()
	<-x.cl.Done()
	<-x.srv.Done()
	<-x.serveErr
	checkLeaks(t, x.pool, x.g)
}

// SendItem.Hold: response headers, message and trailers leave in one
// write; without it, in three.
func TestHoldBatchesWrites(t *testing.T) {
	for _, hold := range []bool{false, true} {
		x := newCountedExchange(t)
		if err := x.ss.Send(holding(HeadersItem(respFields, false), hold)); err != nil {
			t.Fatal(err)
		}
		if err := x.ss.Send(holding(DataItem(x.pool.Copy([]byte("reply")), false), hold)); err != nil {
			t.Fatal(err)
		}
		if err := x.ss.Send(TrailersItem(trailerFields)); err != nil {
			t.Fatal(err)
		}
		want := 3
		if hold {
			want = 1
		}
		if n := x.writes(); n != want {
			t.Errorf("hold=%v: %d writes for headers+data+trailers, want %d", hold, n, want)
		}
		x.recvResponse(t, "reply")
		x.close(t)
	}
}

// API misuse gets sentinel errors, never a frame on the wire.
func TestMisuse(t *testing.T) {
	g := runtime.NumGoroutine()
	got := make(chan *Stream, 1)
	h := func(pool *bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) { got <- s }) }
	p := newPair(t, Config{}, Config{}, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	ss := <-got
	if err := ss.Send(DataItem(p.pool.Copy([]byte("x")), false)); !errors.Is(err, ErrHeadersNotSent) {
		t.Errorf("DATA before HEADERS: %v", err)
	}
	if err := s.Send(DataItem(p.pool.Copy([]byte("x")), false)); !errors.Is(err, ErrSendClosed) {
		t.Errorf("DATA after END_STREAM: %v", err)
	}
	if err := ss.Send(HeadersItem(respFields, false)); err != nil {
		t.Fatal(err)
	}
	if err := ss.Send(HeadersItem(respFields, false)); !errors.Is(err, ErrTrailersMustEnd) {
		t.Errorf("second HEADERS without END_STREAM: %v", err)
	}
	if _, _, err := ss.RecvHeaders(); !errors.Is(err, ErrWrongRole) {
		t.Errorf("RecvHeaders on a server stream: %v", err)
	}
	if _, err := p.server.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true}); !errors.Is(err, ErrWrongRole) {
		t.Errorf("NewStream on a server: %v", err)
	}
	if err := ss.Send(TrailersItem(trailerFields)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("Recv: %v", err)
	}
	s.Release()
	ss.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// GoAway(NO_ERROR) with no stream open closes the connection; the peer sees
// the GOAWAY and its NewStream fails as retryable.
func TestGoAwayIdle(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	roundTrip(t, p.client, p.pool, []byte("x"))
	p.server.GoAway(h2frame.ErrCodeNo, "bye")
	select {
	case <-p.server.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server did not close after GoAway with no streams")
	}
	<-p.client.GoingAway()
	if _, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true}); !errors.Is(err, ErrGoingAway) && !errors.Is(err, ErrConnClosed) {
		t.Fatalf("NewStream after GOAWAY: %v", err)
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// Once the receiver has seen the end of the stream, Recv and Trailers
// answer without the engine's lock: with the lock held elsewhere they
// still return at once.
func TestRecvAfterEOFWithoutLock(t *testing.T) {
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	defer p.close(t)
	s, _ := echoExchange(t, p.client, p.pool, []byte("x"))
	defer s.Release()
	p.client.mu.Lock()
	done := make(chan error, 1)
	go func() {
		_, err := s.Recv()
		if tr := s.Trailers(); len(tr) != 1 || tr[0].Value != "0" {
			err = fmt.Errorf("trailers %v", tr)
		}
		done <- err
	}()
	select {
	case err := <-done:
		p.client.mu.Unlock()
		if err != io.EOF {
			t.Fatalf("Recv after EOF: %v, want io.EOF", err)
		}
	case <-time.After(2 * time.Second):
		p.client.mu.Unlock()
		<-done
		t.Fatal("Recv or Trailers after EOF waited for the engine's lock")
	}
}
