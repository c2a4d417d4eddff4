package leangrpc_test

// The attack suite: raw HTTP/2 peers (internal/h2test) attack a server made
// by leangrpc.NewServer() on loopback, after the public descriptions of the
// HTTP/2 attacks (the 2019 CVEs, rapid reset of 2023, the CONTINUATION
// flood of 2024, slowloris, HPACK bombs). Each test bounds its own time,
// asserts the server's reaction (a GOAWAY code, a reset, a close, memory
// held as the pool and the heap count it) and, at the end, that goroutines
// and pool buffers are back at their baseline and a legitimate client is
// served.
//
// An attack whose defence does not exist yet calls missingDefence, which
// skips it with the defence's name; LEANGRPC_ATTACK_ALL=1 runs those too
// (they fail until the defence is built).

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/budget"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
)

// attackWait bounds each wait for the server's reaction to an attack.
const attackWait = 5 * time.Second

// missingDefence skips an attack test whose defence is not built yet,
// naming it, unless LEANGRPC_ATTACK_ALL is set.
func missingDefence(t *testing.T, defence string) {
	t.Helper()
	if os.Getenv("LEANGRPC_ATTACK_ALL") == "" {
		t.Skip("missing defence: " + defence + " (LEANGRPC_ATTACK_ALL=1 runs it)")
	}
}

// target is a server under attack.
type target struct {
	addr string
	srv  *leangrpc.Server
}

// attackTarget starts leangrpc.NewServer(opts...) with the interop test
// service on loopback. At cleanup it checks that a legitimate client is
// still served, stops the server, and checks that goroutines and pool
// buffers return to their baseline.
func attackTarget(t *testing.T, opts ...leangrpc.ServerOption) *target {
	t.Helper()
	sockio.StartIdlePoller() // process-wide, started before the baseline
	runtime.GC()
	base := runtime.NumGoroutine()
	bufs := bufpool.Default().Outstanding()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// An account of its own, of the default size: the default account is
	// shared by every server of the process, and connections of earlier
	// tests still ending would move it under this one's checks.
	own := leangrpc.MemoryBudget(budget.Default().Limit())
	// Every peer of these tests, the legitimate client's too, comes from
	// 127.0.0.1, and most tests attack more than once: the throttle on
	// repeat offenders would refuse their next connections. It has tests
	// of its own (attack_offenders_test.go), which pass their own option.
	unthrottled := leangrpc.OffenderBackoff(0)
	s := leangrpc.NewServer(append([]leangrpc.ServerOption{own, unthrottled}, opts...)...)
	mem := leangrpc.MemoryInUse(s)
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(lis)
	tg := &target{addr: lis.Addr().String(), srv: s}
	t.Cleanup(func() {
		s.Stop()
		checkGoroutines(t, base)
		checkBuffers(t, bufs)
		tg.checkMemory(t, mem)
	})
	return tg
}

// legit makes one call from a leangrpc client on a connection of its own;
// it must succeed while or after the server is attacked.
func (tg *target) legit(t *testing.T) {
	t.Helper()
	cc, err := leangrpc.NewClient(tg.addr, leangrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
		t.Errorf("a legitimate call under attack failed: %v", err)
	}
}

// dial opens a raw TCP connection to the server, closed at cleanup.
func (tg *target) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// peer opens a connection and runs the preface with settings.
func (tg *target) peer(t *testing.T, settings ...h2frame.Setting) *h2test.Peer {
	t.Helper()
	p := h2test.NewPeer(t, tg.dial(t), h2test.ClientRole)
	p.Timeout = attackWait
	p.Greet(settings...)
	return p
}

// unaryRequest is a complete UnaryCall request body asking for a response
// of size bytes.
func unaryRequest(size int32) []byte {
	msg, _ := proto.Marshal(&testpb.SimpleRequest{ResponseSize: size})
	return grpcFrame(0, msg)
}

const (
	unaryPath     = "/grpc.testing.TestService/UnaryCall"
	streamingPath = "/grpc.testing.TestService/StreamingInputCall"
)

// flood writes b to c from a goroutine, for an attack that does not read
// while it writes; a write the server stops reading ends at attackWait. The
// returned channel reports the bytes written once the write ended.
func flood(c net.Conn, b []byte) <-chan int {
	done := make(chan int, 1)
	go func() {
		c.SetWriteDeadline(time.Now().Add(attackWait))
		n, _ := c.Write(b)
		done <- n
	}()
	return done
}

// wantGoAway reads until a GOAWAY and checks its code; the server closing
// without one, or no GOAWAY within attackWait, fails the test. Other frames
// are skipped.
func wantGoAway(t *testing.T, p *h2test.Peer, code h2frame.ErrCode) *h2test.Frame {
	t.Helper()
	deadline := time.Now().Add(attackWait)
	for {
		f, err := p.ReadFrame(time.Until(deadline))
		if err != nil {
			t.Fatalf("want GOAWAY %v: %v", code, err)
		}
		if f.Type == h2frame.TypeGoAway {
			if f.ErrCode() != code {
				t.Fatalf("GOAWAY %v (%q), want %v", f.ErrCode(), f.DebugData(), code)
			}
			return f
		}
	}
}

// wantGoAwayOrEnd is wantGoAway that also accepts the connection's end
// without a GOAWAY.
func wantGoAwayOrEnd(t *testing.T, p *h2test.Peer, code h2frame.ErrCode) {
	t.Helper()
	deadline := time.Now().Add(attackWait)
	for {
		f, err := p.ReadFrame(time.Until(deadline))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("want GOAWAY %v or the connection's end: still open after %v", code, attackWait)
		}
		if err != nil {
			return
		}
		if f.Type == h2frame.TypeGoAway {
			if f.ErrCode() != code {
				t.Fatalf("GOAWAY %v (%q), want %v", f.ErrCode(), f.DebugData(), code)
			}
			return
		}
	}
}

// wantEnd reads until the server closes the connection (GOAWAY and other
// frames may come first) and fails if it is still open after d.
func wantEnd(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	var buf [4096]byte
	for {
		_, err := c.Read(buf[:])
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection still open after %v", d)
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			t.Logf("connection ended with %v", err)
		}
		return
	}
}

// checkMemory waits until the server's memory budget is back at base (its
// value before the server started), as it must once every connection
// ended and every handler returned.
func (tg *target) checkMemory(t *testing.T, base int64) {
	t.Helper()
	deadline := time.Now().Add(attackWait)
	for leangrpc.MemoryInUse(tg.srv) != base && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if used := leangrpc.MemoryInUse(tg.srv); used != base {
		t.Errorf("the server's memory budget is at %d bytes after the attack, %d before", used, base)
	}
}

// heapInUse returns the heap in use after a collection.
func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}
