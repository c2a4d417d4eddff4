package leangrpc_test

import (
	"crypto/tls"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/budget"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
)

// stalledConns opens n connections of each slowloris kind: nothing sent,
// half the preface, the preface and half the first SETTINGS frame's header.
func stalledConns(t *testing.T, tg *target, n int) []*h2test.Peer {
	t.Helper()
	var peers []*h2test.Peer
	settings := h2test.AppendFrame(nil, h2frame.TypeSettings, 0, 0, nil)
	for _, sent := range []string{"", h2test.ClientPreface[:12], h2test.ClientPreface + string(settings[:4])} {
		for range n {
			p := h2test.NewPeer(t, tg.dial(t), h2test.ClientRole)
			if sent != "" {
				p.WriteBytes([]byte(sent))
			}
			peers = append(peers, p)
		}
	}
	return peers
}

// TestAttackStalledHandshake: slowloris, connections that stop before the
// preface and first SETTINGS are complete. Each is closed once
// ConnectionTimeout has passed since it was accepted.
func TestAttackStalledHandshake(t *testing.T) {
	const timeout = time.Second
	tg := attackTarget(t, leangrpc.ConnectionTimeout(timeout))
	base := leangrpc.MemoryInUse(tg.srv)
	peers := stalledConns(t, tg, 16)
	// Each waiting connection is charged to the memory budget, so that a
	// flood of them reaches its soft level and is refused.
	want := base + int64(len(peers))*budget.GreetingBytes
	deadline := time.Now().Add(attackWait)
	for leangrpc.MemoryInUse(tg.srv) < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if used := leangrpc.MemoryInUse(tg.srv); used < want {
		t.Errorf("%d stalled connections: %d bytes charged to the budget, want at least %d", len(peers), used-base, want-base)
	}
	for _, p := range peers {
		wantEnd(t, p.Conn, timeout+2*time.Second)
	}
	tg.legit(t) // and the cleanup checks the budget is back at its base
}

// TestAttackStalledHandshakeHoldsNoGoroutine: on the Linux socket path a
// connection that has sent nothing, or part of its preface and first
// SETTINGS, or its whole greeting and then part of the next frame's
// header, is waited for by the idle machinery: no goroutine and no pooled
// buffer per connection.
func TestAttackStalledHandshakeHoldsNoGoroutine(t *testing.T) {
	if sockio.StartIdlePoller() != nil {
		t.Skip("the portable socket path keeps a reader per connection")
	}
	tg := attackTarget(t)
	base := runtime.NumGoroutine()
	bufs := bufpool.Default().Outstanding()
	const n = 64
	stalledConns(t, tg, n)
	for range n {
		h2test.NewPeer(t, tg.dial(t), h2test.ClientRole).WriteBytes(greetedHalfHeader())
	}
	time.Sleep(200 * time.Millisecond) // the server accepts and reads what came
	if grown := runtime.NumGoroutine() - base; grown > n/4 {
		t.Errorf("%d stalled connections hold %d goroutines", 4*n, grown)
	}
	if held := bufpool.Default().Outstanding() - bufs; held > n/4 {
		t.Errorf("%d stalled connections hold %d pool buffers", 4*n, held)
	}
	tg.legit(t)
}

// greetedHalfHeader is a client's whole greeting (preface and SETTINGS)
// followed by 4 bytes of a PING's frame header.
func greetedHalfHeader() []byte {
	b := h2test.AppendFrame([]byte(h2test.ClientPreface), h2frame.TypeSettings, 0, 0, nil)
	ping := h2test.AppendFrame(nil, h2frame.TypePing, 0, 0, make([]byte, 8))
	return append(b, ping[:4]...)
}

// halfClientHello is the start of a TLS handshake record that announces
// 512 bytes and brings 4.
var halfClientHello = []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc}

// TestAttackStalledTLSHandshake: with TLS credentials, connections that
// send nothing, or part of a ClientHello, are closed once ConnectionTimeout
// has passed since they were accepted; on the Linux socket path those that
// send nothing wait for their first bytes in the idle poller, holding no
// goroutine.
func TestAttackStalledTLSHandshake(t *testing.T) {
	const timeout = time.Second
	setup := serverTLSSetup(t)
	tg := attackTarget(t, leangrpc.Creds(setup.server), leangrpc.ConnectionTimeout(timeout))
	base := runtime.NumGoroutine()
	const n = 64
	var conns []net.Conn
	for range n {
		conns = append(conns, tg.dial(t))
	}
	time.Sleep(200 * time.Millisecond) // the server accepts them
	if sockio.StartIdlePoller() == nil {
		if grown := runtime.NumGoroutine() - base; grown > n/4 {
			t.Errorf("%d connections waiting for their ClientHello hold %d goroutines", n, grown)
		}
	}
	for range 16 {
		c := tg.dial(t)
		c.Write(halfClientHello)
		conns = append(conns, c)
	}
	for _, c := range conns {
		wantEnd(t, c, timeout+2*time.Second)
	}
	// A TLS client is still served.
	cc, err := leangrpc.NewClient(tg.addr, leangrpc.WithTransportCredentials(setup.client))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
		t.Errorf("a TLS call after the attack failed: %v", err)
	}
}

// TestStopClosesWaitingHandshakes: Stop and GracefulStop close connections
// whose TLS handshake has not begun and return at once, not after
// ConnectionTimeout.
func TestStopClosesWaitingHandshakes(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		setup := serverTLSSetup(t)
		s := leangrpc.NewServer(leangrpc.Creds(setup.server))
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(lis)
		var conns []net.Conn
		for range 8 {
			c, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns = append(conns, c)
		}
		time.Sleep(100 * time.Millisecond) // the server accepts them
		start := time.Now()
		if graceful {
			s.GracefulStop()
		} else {
			s.Stop()
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("stop (graceful %v) with handshakes waiting took %v", graceful, took)
		}
		for _, c := range conns {
			wantEnd(t, c, time.Second)
		}
	}
}

// TestAttackStalledInFrame: a greeted peer that stops inside a frame (half
// a frame header, or half a payload) is closed with GOAWAY
// ENHANCE_YOUR_CALM after a bound; here the test shortens it with
// ConnectionTimeout. The portable socket path keeps a reader goroutine and
// its read buffer for every connection, idle or not, so there a stalled
// frame costs what an idle connection does and is not bounded.
func TestAttackStalledInFrame(t *testing.T) {
	if sockio.StartIdlePoller() != nil {
		t.Skip("the portable socket path keeps a reader per connection")
	}
	const timeout = time.Second
	tg := attackTarget(t, leangrpc.ConnectionTimeout(timeout))
	ping := h2test.AppendFrame(nil, h2frame.TypePing, 0, 0, make([]byte, 8))
	for _, part := range [][]byte{ping[:4], ping[:12]} {
		p := tg.peer(t)
		start := time.Now()
		p.WriteBytes(part)
		wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
		if took := time.Since(start); took < timeout {
			t.Errorf("closed %v after the stall, before the bound of %v", took, timeout)
		}
		wantEnd(t, p.Conn, time.Second)
	}
	tg.legit(t)
}

// TestSlowFrameNotStalled: a request whose DATA frame arrives slowly but
// steadily, over several times the stall bound, is served: the bound is on
// a read that makes no progress, not on a frame's time.
func TestSlowFrameNotStalled(t *testing.T) {
	const timeout = 500 * time.Millisecond
	tg := attackTarget(t, leangrpc.ConnectionTimeout(timeout))
	p := tg.peer(t)
	msg, _ := proto.Marshal(&testpb.SimpleRequest{ResponseSize: 10, Payload: &testpb.Payload{Body: make([]byte, 12<<10)}})
	data := h2test.AppendFrame(nil, h2frame.TypeData, h2frame.FlagEndStream, 1, grpcFrame(0, msg))
	p.WriteHeadersBlock(1, h2frame.FlagEndHeaders, requestBlock(unaryPath))
	start := time.Now()
	for i := 0; i < len(data); i += 256 {
		p.WriteBytes(data[i:min(i+256, len(data))])
		time.Sleep(timeout / 10)
	}
	if took := time.Since(start); took < 4*timeout {
		t.Fatalf("the frame took %v, want over %v", took, 4*timeout)
	}
	if h := p.WantHeaders(1); h.Get(":status") != "200" {
		t.Fatalf("status %q", h.Get(":status"))
	}
	if _, tr := p.WantBodyTrailers(1, true); tr.Get("grpc-status") != "0" {
		t.Fatalf("grpc-status %q", tr.Get("grpc-status"))
	}
}

// TestStalledConnectionCost measures what connections that stalled before
// their greeting cost the server, plaintext and TLS: heap, goroutines and
// RSS per connection (the heap and RSS include the test's own client
// sockets). LEANGRPC_STALLED_N sets how many of each kind (default 100).
// On the Linux socket path they hold no goroutine.
func TestStalledConnectionCost(t *testing.T) {
	n := 100
	if v, err := strconv.Atoi(os.Getenv("LEANGRPC_STALLED_N")); err == nil && v > 0 {
		n = v
	}
	poller := sockio.StartIdlePoller() == nil
	for _, tc := range []struct {
		name string
		tls  bool
		sent []byte
	}{
		{"plaintext/nothing", false, nil},
		{"plaintext/half-preface", false, []byte(h2test.ClientPreface[:12])},
		{"plaintext/half-frame-header", false, greetedHalfHeader()},
		{"tls/nothing", true, nil},
		{"tls/half-clienthello", true, halfClientHello},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []leangrpc.ServerOption
			if tc.tls {
				opts = append(opts, leangrpc.Creds(serverTLSSetup(t).server))
			}
			tg := attackTarget(t, opts...)
			runtime.GC()
			base, heap, rss := runtime.NumGoroutine(), heapInUse(), residentBytes()
			conns := make([]net.Conn, 0, n)
			for range n {
				c := tg.dial(t)
				if tc.sent != nil {
					c.Write(tc.sent)
				}
				conns = append(conns, c)
			}
			time.Sleep(300 * time.Millisecond) // the server accepts and reads what came
			goroutines := runtime.NumGoroutine() - base
			perHeap := (heapInUse() - heap) / int64(n)
			perRSS := (residentBytes() - rss) / int64(n)
			t.Logf("%d connections: %.2f goroutines, %d B heap, %d B RSS each", n, float64(goroutines)/float64(n), perHeap, perRSS)
			if poller && !(tc.tls && tc.sent != nil) && goroutines > n/4 {
				t.Errorf("%d stalled connections hold %d goroutines", n, goroutines)
			}
			for _, c := range conns {
				c.Close()
			}
		})
	}
}

// residentBytes is the process's resident set size, from /proc on Linux;
// 0 elsewhere.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// TestAttackStalledAfterTLSHandshake: a client that takes most of
// ConnectionTimeout for its TLS handshake and then sends no preface is
// closed when ConnectionTimeout has passed since the accept, as grpc-go's
// one deadline does, not a whole ConnectionTimeout after the handshake.
func TestAttackStalledAfterTLSHandshake(t *testing.T) {
	const timeout = 2 * time.Second
	setup := serverTLSSetup(t)
	tg := attackTarget(t, leangrpc.Creds(setup.server), leangrpc.ConnectionTimeout(timeout))
	raw := tg.dial(t)
	start := time.Now()
	time.Sleep(timeout * 3 / 4)
	tc := tls.Client(raw, &tls.Config{RootCAs: tlsCAPool(t, "x509/server_ca_cert.pem"), ServerName: "x.test.example.com", NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	wantEnd(t, tc, 2*timeout)
	if took := time.Since(start); took > timeout*3/2 {
		t.Errorf("a connection silent after its handshake was closed %v after the accept, want about %v", took.Round(10*time.Millisecond), timeout)
	}
}
