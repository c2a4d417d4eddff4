package h2conn

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// slowConn delays everything read from the inner conn by a fixed latency,
// as a long link would.
type slowConn struct {
	net.Conn
	delay time.Duration

	mu     sync.Mutex
	cond   *sync.Cond
	chunks []slowChunk
	err    error
	cur    []byte
}

type slowChunk struct {
	at   time.Time
	data []byte
}

func newSlowConn(c net.Conn, delay time.Duration) *slowConn {
	s := &slowConn{Conn: c, delay: delay}
	s.cond = sync.NewCond(&s.mu)
	go func() {
		for {
			buf := make([]byte, 64<<10)
			n, err := c.Read(buf)
			s.mu.Lock()
			if n > 0 {
				s.chunks = append(s.chunks, slowChunk{time.Now().Add(delay), buf[:n]})
			}
			if err != nil {
				s.err = err
			}
			s.cond.Broadcast()
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *slowConn) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.cur) == 0 {
		if len(s.chunks) > 0 {
			if wait := time.Until(s.chunks[0].at); wait > 0 {
				s.mu.Unlock()
				time.Sleep(wait)
				s.mu.Lock()
				continue
			}
			s.cur = s.chunks[0].data
			s.chunks = s.chunks[1:]
			break
		}
		if s.err != nil {
			return 0, s.err
		}
		s.cond.Wait()
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	return n, nil
}

// On a link with latency, a download that fills the stream window every
// round trip makes the receiver grow its windows.
func TestBDPGrowsWindowOnLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	g := runtime.NumGoroutine()
	pool := bufpool.New(nil)
	cn, sn := net.Pipe()
	const window = 64 << 10
	srv := NewServerConn(sn, Config{Pool: pool}, HandlerFunc(func(s *Stream) {
		go func() {
			s.Send(HeadersItem(respFields, false))
			for range 64 {
				if s.Send(DataItem(pool.Get(32<<10), false)) != nil {
					return
				}
			}
			s.Send(TrailersItem(trailerFields))
		}()
	}))
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	slow := newSlowConn(cn, 10*time.Millisecond)
	cl, err := NewClientConn(slow, Config{Pool: pool, InitialStreamWindow: window, InitialConnWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	s, err := cl.NewStream(context.Background(), reqFields("/download"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	for {
		b, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Free()
	}
	cl.mu.Lock()
	grown := cl.streamWindow.Load()
	cl.mu.Unlock()
	if grown <= window {
		t.Errorf("stream window stayed at %d on a 10ms link", grown)
	}
	s.Release()
	cl.Close()
	srv.Close()
	<-cl.Done()
	<-srv.Done()
	<-serveErr
	checkLeaks(t, pool, g)
}

// The BDP estimator appears once a stream window's worth of DATA arrived,
// in the state it would have had counting from the first byte; a
// connection of small calls, or one with BDP off, never makes it, and an
// ACK of a BDP PING nobody sent finds nothing to update.
func TestBDPLazy(t *testing.T) {
	c := &Conn{cfg: &Config{InitialStreamWindow: 1000}}
	if b := c.bdpLocked(400); b != nil {
		t.Fatal("estimator made before a window's worth")
	}
	c.bdp.onAck(time.Now()) // an unsolicited ACK: no panic, nothing to do
	b := c.bdpLocked(600)
	if b == nil || c.bdp != b {
		t.Fatal("no estimator after a window's worth")
	}
	now := time.Now()
	if ping, _ := b.onData(600, func() time.Time { return now }); !ping {
		t.Fatal("the first window's worth did not start a BDP sample")
	}
	if c.bdpLocked(1) != b {
		t.Fatal("a second estimator was made")
	}
	off := &Conn{cfg: &Config{InitialStreamWindow: 1000, DisableBDP: true}}
	if off.bdpLocked(1<<20) != nil || off.bdp != nil {
		t.Fatal("estimator made with BDP off")
	}
}

// Small RPCs never make the BDP estimator ping (grpc-go pings on every
// burst of data; we wait for a window's worth).
func TestNoBDPPingsOnSmallRPCs(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, true)
	for range 300 {
		roundTrip(t, p.client, p.pool, make([]byte, 1000))
	}
	p.server.mu.Lock()
	pinged := p.server.lastPingAt != 0
	p.server.mu.Unlock()
	if pinged {
		t.Error("the client pinged during small RPCs")
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}
