package h2conn

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// waitGoroutines waits until at most n goroutines run.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, want at most %d\n%s", runtime.NumGoroutine(), n, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newAsyncPair is newPair over TCP with the server started by ServeAsync;
// ended is closed by its onEnd.
func newAsyncPair(t *testing.T, ccfg, scfg Config) (p *pair, ended chan struct{}) {
	t.Helper()
	pool := bufpool.New(nil)
	ccfg.Pool, scfg.Pool = pool, pool
	ccfg.PooledReads, scfg.PooledReads = true, true
	cn, sn := h2test.TCPPair(t)
	p = &pair{pool: pool}
	p.server = NewServerConn(sn, scfg, echoHandler(t, pool))
	ended = make(chan struct{})
	go p.server.ServeAsync(func() { close(ended) })
	var err error
	p.client, err = NewClientConn(cn, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, ended
}

// Conns of one configuration share its normalized copy, and a window a
// connection grows stays its own.
func TestConfigInterned(t *testing.T) {
	pool := bufpool.New(nil)
	a1, a2 := net.Pipe()
	defer a1.Close()
	defer a2.Close()
	cfg := Config{Pool: pool, InitialConnWindow: 1 << 16}
	c1 := newConn(a1, cfg, RoleServer, nil)
	c2 := newConn(a2, cfg, RoleServer, nil)
	if c1.cfg != c2.cfg {
		t.Fatal("two conns of one configuration hold separate copies")
	}
	// A full table still takes new configurations (the bound evicts), so
	// sharing does not stop after the first maxInternedConfigs pools.
	for i := 0; i < 2*maxInternedConfigs; i++ {
		internConfig(Config{Pool: bufpool.New(nil)})
	}
	if n := len(configs.m); n > maxInternedConfigs {
		t.Fatalf("%d interned configurations; bound %d", n, maxInternedConfigs)
	}
	late := Config{Pool: bufpool.New(nil)}
	if internConfig(late) != internConfig(late) {
		t.Fatal("a configuration created after the table filled is not shared")
	}
	c1.mu.Lock()
	c1.growWindowsLocked(4 << 20)
	c1.mu.Unlock()
	if c1.connWindow != 8<<20 || c2.connWindow != 1<<16 || c1.cfg.InitialConnWindow != 1<<16 {
		t.Fatalf("conn windows %d and %d, shared config %d", c1.connWindow, c2.connWindow, c1.cfg.InitialConnWindow)
	}
}

// A conn of either role makes its GoingAway and Done channels on demand;
// one taken before the end and one taken after are both closed, and
// IsGoingAway and Ended agree with them.
func TestGoingAwayLazy(t *testing.T) {
	for _, role := range []Role{RoleServer, RoleClient} {
		a, b := net.Pipe()
		go io.Copy(io.Discard, b) // takes the GOAWAY of Close
		c := newConn(a, Config{Pool: bufpool.New(nil)}, role, nil)
		if c.notify != nil {
			t.Fatalf("%v conn made its channels up front", role)
		}
		before := c.GoingAway()
		select {
		case <-before:
			t.Fatalf("%v: GoingAway closed on a live conn", role)
		default:
		}
		if c.IsGoingAway() || c.Ended() {
			t.Fatalf("%v: IsGoingAway %v, Ended %v on a live conn", role, c.IsGoingAway(), c.Ended())
		}
		c.Close()
		for _, ch := range []<-chan struct{}{before, c.GoingAway()} {
			select {
			case <-ch:
			default:
				t.Fatalf("%v: GoingAway open after Close", role)
			}
		}
		if !c.IsGoingAway() {
			t.Fatalf("%v: IsGoingAway false after Close", role)
		}
		b.Close()
	}
}

// Conn, its frame writer included, stays within the 480-byte size class
// (an object over 512 bytes would also carry an 8-byte malloc header).
func TestConnSize(t *testing.T) {
	if n := unsafe.Sizeof(Conn{}); n > 480 {
		t.Fatalf("Conn is %d bytes, want at most 480", n)
	}
}

// endHandler records the conn its ConnEnded was called with.
type endHandler struct {
	HandlerFunc
	ended chan *Conn
}

func (h endHandler) ConnEnded(c *Conn) { h.ended <- c }

// ServeAsync(nil) with an EndHandler calls its ConnEnded once the
// connection ended: here one closed before it was served, and one whose
// peer goes away.
func TestServeAsyncEndHandler(t *testing.T) {
	for _, closeFirst := range []bool{true, false} {
		a, b := net.Pipe()
		go io.Copy(io.Discard, b)
		h := endHandler{HandlerFunc: func(*Stream) {}, ended: make(chan *Conn, 2)}
		c := newConn(a, Config{Pool: bufpool.New(nil)}, RoleServer, h)
		if closeFirst {
			c.Close()
		} else {
			b.Close()
		}
		c.ServeAsync(nil)
		select {
		case got := <-h.ended:
			if got != c {
				t.Fatalf("closeFirst %v: ConnEnded with another conn", closeFirst)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("closeFirst %v: ConnEnded not called", closeFirst)
		}
		if len(h.ended) != 0 {
			t.Fatalf("closeFirst %v: ConnEnded called twice", closeFirst)
		}
		b.Close()
	}
}

// The idle wait starts short, doubles per creditsPerDoubling reads and
// stops at idleReadWait.
func TestIdleWaitBounds(t *testing.T) {
	c := &Conn{}
	if w := c.idleWait(); w != minIdleReadWait {
		t.Fatalf("fresh connection waits %v, want %v", w, minIdleReadWait)
	}
	c.idleCredit = creditsPerDoubling - 1
	if w := c.idleWait(); w != minIdleReadWait {
		t.Fatalf("after %d reads: %v, want %v", c.idleCredit, w, minIdleReadWait)
	}
	c.idleCredit = 3 * creditsPerDoubling
	if w := c.idleWait(); w != 8*minIdleReadWait {
		t.Fatalf("after %d reads: %v, want %v", c.idleCredit, w, 8*minIdleReadWait)
	}
	c.idleCredit = 255
	if w := c.idleWait(); w != idleReadWait {
		t.Fatalf("idle wait at credit 255: %v, want %v", w, idleReadWait)
	}
}

// settledGoroutines returns the number of goroutines once it has not
// changed for 50 ms (waiting at most 3 s): the baseline of a test that
// infers from the count that readers went idle, so that goroutines of
// earlier tests still ending (a closing connection's reader, a short-lived
// writer) do not leave later and pass for this test's readers.
func settledGoroutines() int {
	deadline := time.Now().Add(3 * time.Second)
	n, since := runtime.NumGoroutine(), time.Now()
	for time.Since(since) < 50*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// readSource, which every server connection on a socket with pooled reads
// holds for its life, stays within the 128-byte size class.
func TestReadSourceSize(t *testing.T) {
	if n := unsafe.Sizeof(readSource{}); n > 128 {
		t.Fatalf("readSource is %d bytes, want at most 128", n)
	}
}
