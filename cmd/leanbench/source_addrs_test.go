package main

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestLoopbackSources(t *testing.T) {
	for _, k := range []int{0, 1} {
		if got := loopbackSources(k); got != nil {
			t.Errorf("loopbackSources(%d) = %v, want nil (the kernel's choice)", k, got)
		}
	}
	got := loopbackSources(300)
	for i, want := range map[int]string{0: "127.0.0.1", 1: "127.0.0.2", 254: "127.0.0.255", 255: "127.0.1.0", 299: "127.0.1.44"} {
		if got[i].String() != want {
			t.Errorf("source %d = %s, want %s", i, got[i], want)
		}
	}
}

// recordingListener records the remote address of every connection it
// accepts.
type recordingListener struct {
	net.Listener
	mu    sync.Mutex
	peers map[string]int // by remote IP
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.peers[c.RemoteAddr().(*net.TCPAddr).IP.String()]++
		l.mu.Unlock()
	}
	return c, err
}

func (l *recordingListener) counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.peers {
		out[k] = v
	}
	return out
}

func listenRecording(t *testing.T) *recordingListener {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("only Linux routes all of 127/8 to lo")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	return &recordingListener{Listener: lis, peers: map[string]int{}}
}

// TestSpreadDialerTakesSourcesInTurn: each source makes its share of the
// connections, no more.
func TestSpreadDialerTakesSourcesInTurn(t *testing.T) {
	lis := listenRecording(t)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dial := spreadDialer(loopbackSources(3))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 9 {
		c, err := dial(ctx, lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitCount(t, lis, 9)
	want := map[string]int{"127.0.0.1": 3, "127.0.0.2": 3, "127.0.0.3": 3}
	if got := lis.counts(); !equalCounts(got, want) {
		t.Errorf("connections by source: %v, want %v", got, want)
	}
	if spreadDialer(nil) != nil {
		t.Error("spreadDialer(nil) is not nil: stacks would not dial as their own")
	}
}

// TestIdleDialerSpreadsEveryStack: both stacks' clients dial through the
// spreading dialer (leangrpc.WithContextDialer, grpc.WithContextDialer),
// and each connection still makes its RPC.
func TestIdleDialerSpreadsEveryStack(t *testing.T) {
	for _, name := range []string{stackLean, stackGrpc} {
		t.Run(name, func(t *testing.T) {
			lis := listenRecording(t)
			srv, err := newServerSafe(impls[name], nil)
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(lis)
			defer srv.Stop()
			d := &idleDialer{im: impls[name], addr: lis.Addr().String(), rpcTimeout: 5 * time.Second,
				netDial: spreadDialer(loopbackSources(2))}
			closers, err := d.open(context.Background(), 4)
			defer func() {
				for _, c := range closers {
					c()
				}
			}()
			if err != nil {
				t.Fatal(err)
			}
			if n := d.opened.Load(); n != 4 {
				t.Errorf("%d connections counted open, want 4", n)
			}
			want := map[string]int{"127.0.0.1": 2, "127.0.0.2": 2}
			if got := lis.counts(); !equalCounts(got, want) {
				t.Errorf("connections by source: %v, want %v", got, want)
			}
		})
	}
}

// TestIdleChildrenWithSources runs the idle children as leanbench runs
// them for a size that spreads, with three sources for a handful of
// connections.
func TestIdleChildrenWithSources(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	if runtime.GOOS != "linux" {
		t.Skip("only Linux routes all of 127/8 to lo")
	}
	r := &runner{opts: options{settle: 0, timeout: 10 * time.Second}, stdout: new(nopWriter), stderr: new(nopWriter)}
	for _, name := range []string{stackLean, stackGrpc} {
		st := stack{name: name, client: impls[name], server: impls[name]}
		srv, cli, err := r.measureIdle(st, idlePlan{conns: 6, sources: 3}, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if srv.OpenSeconds != 0 || cli.OpenSeconds <= 0 {
			t.Errorf("%s: open seconds server %v, client %v; want the client's only", name, srv.OpenSeconds, cli.OpenSeconds)
		}
	}
}

type nopWriter struct{}

func (*nopWriter) Write(p []byte) (int, error) { return len(p), nil }

func waitCount(t *testing.T, lis *recordingListener, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		total := 0
		for _, v := range lis.counts() {
			total += v
		}
		if total >= n || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
