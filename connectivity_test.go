package leangrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// stateWaiter is what readiness code written for grpc-go uses of a
// ClientConn; both stacks' ClientConns satisfy it.
type stateWaiter interface {
	GetState() connectivity.State
	WaitForStateChange(context.Context, connectivity.State) bool
	Connect()
}

// stateConn is a ClientConn of either stack with the connectivity API.
type stateConn interface {
	grpc.ClientConnInterface
	stateWaiter
	ResetConnectBackoff()
	Close() error
}

// blockUntilReady is the grpc-go idiom that replaces WithBlock: connect and
// wait for READY, or for ctx to end.
func blockUntilReady(ctx context.Context, cc stateWaiter) error {
	cc.Connect()
	for {
		s := cc.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !cc.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}

// trackingDialer dials TCP and records what it did: the attempts, the
// connections still open, and, when gate is set, holds each attempt until
// the test receives from it.
type trackingDialer struct {
	attempts atomic.Int32
	gate     chan struct{} // nil: no hold
	mu       sync.Mutex
	conns    []*trackedConn
}

type trackedConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *trackedConn) Close() error { c.closed.Store(true); return c.Conn.Close() }

func (d *trackingDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	d.attempts.Add(1)
	if d.gate != nil {
		select {
		case d.gate <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: nc}
	d.mu.Lock()
	d.conns = append(d.conns, tc)
	d.mu.Unlock()
	return tc, nil
}

// open counts the dialed connections not closed yet.
func (d *trackingDialer) open() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.conns {
		if !c.closed.Load() {
			n++
		}
	}
	return n
}

// stateOptions configures a ClientConn of either stack.
type stateOptions struct {
	dialer      *trackingDialer
	backoff     time.Duration // the base and largest reconnect delay; 0 keeps the default
	idleTimeout time.Duration // 0 keeps the default
}

func newStateConn(t *testing.T, lean bool, target string, o stateOptions) stateConn {
	t.Helper()
	var lopts []leangrpc.DialOption
	var gopts []grpc.DialOption
	lopts = append(lopts, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	gopts = append(gopts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if o.dialer != nil {
		lopts = append(lopts, leangrpc.WithContextDialer(o.dialer.dial))
		gopts = append(gopts, grpc.WithContextDialer(o.dialer.dial))
	}
	if o.backoff > 0 {
		p := grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: o.backoff, Multiplier: 1, MaxDelay: o.backoff}}
		lopts = append(lopts, leangrpc.WithConnectParams(p))
		gopts = append(gopts, grpc.WithConnectParams(p))
	}
	if o.idleTimeout > 0 {
		lopts = append(lopts, leangrpc.WithIdleTimeout(o.idleTimeout))
		gopts = append(gopts, grpc.WithIdleTimeout(o.idleTimeout))
	}
	var cc stateConn
	var err error
	if lean {
		cc, err = leangrpc.NewClient(target, lopts...)
	} else {
		cc, err = grpc.NewClient(target, gopts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// stoppableServer starts a leangrpc test server and returns its address
// and a stop function (also run when the test ends).
func stoppableServer(t *testing.T) (string, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	var once sync.Once
	stop := func() { once.Do(func() { s.Stop(); <-done }) }
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// waitChange waits (bounded) for the state to leave from and returns the
// new state.
func waitChange(t *testing.T, cc stateConn, from connectivity.State) connectivity.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !cc.WaitForStateChange(ctx, from) {
		t.Fatalf("state still %v after 10s", from)
	}
	return cc.GetState()
}

// A channel to a live server: IDLE after NewClient, CONNECTING once
// Connect starts the dial (held by the dialer), READY when it is up.
func TestConnectivityLiveServer(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		addr := leanTestServer(t)
		d := &trackingDialer{gate: make(chan struct{})}
		cc := newStateConn(t, lean, "passthrough:///"+addr, stateOptions{dialer: d})
		seq := []connectivity.State{cc.GetState()}
		cc.Connect()
		seq = append(seq, waitChange(t, cc, seq[0]))
		<-d.gate // let the dial through
		seq = append(seq, waitChange(t, cc, seq[1]))
		want := []connectivity.State{connectivity.Idle, connectivity.Connecting, connectivity.Ready}
		if !equalStates(seq, want) {
			t.Fatalf("states %v, want %v", seq, want)
		}
		if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall on a READY channel: %v", err)
		}
		if n := d.attempts.Load(); n != 1 {
			t.Errorf("%d dials, want 1", n)
		}
	})
}

// A call leaves IDLE as Connect does.
func TestConnectivityCallLeavesIdle(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		cc := newStateConn(t, lean, "passthrough:///"+leanTestServer(t), stateOptions{})
		if s := cc.GetState(); s != connectivity.Idle {
			t.Fatalf("new channel is %v, want IDLE", s)
		}
		if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		if s := cc.GetState(); s != connectivity.Ready {
			t.Fatalf("after a call: %v, want READY", s)
		}
	})
}

// A channel to a dead address: CONNECTING, then TRANSIENT_FAILURE when the
// dial fails; ResetConnectBackoff dials again at once (the backoff is 10
// seconds) and the channel stays in TRANSIENT_FAILURE meanwhile, as
// grpc-go's pick_first keeps it (sticky TRANSIENT_FAILURE).
func TestConnectivityDeadAddress(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		d := &trackingDialer{gate: make(chan struct{})}
		cc := newStateConn(t, lean, "passthrough:///"+deadAddr(t), stateOptions{dialer: d, backoff: 10 * time.Second})
		cc.Connect()
		if s := waitChange(t, cc, connectivity.Idle); s != connectivity.Connecting {
			t.Fatalf("after Connect: %v, want CONNECTING", s)
		}
		<-d.gate
		if s := waitChange(t, cc, connectivity.Connecting); s != connectivity.TransientFailure {
			t.Fatalf("after the dial failed: %v, want TRANSIENT_FAILURE", s)
		}
		if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}); err == nil {
			t.Fatal("EmptyCall in TRANSIENT_FAILURE succeeded")
		}
		if n := d.attempts.Load(); n != 1 {
			t.Fatalf("%d dials during the backoff, want 1", n)
		}
		start := time.Now()
		cc.ResetConnectBackoff()
		select {
		case <-d.gate:
		case <-time.After(5 * time.Second):
			t.Fatal("no dial within 5s of ResetConnectBackoff")
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("redial %v after ResetConnectBackoff", el)
		}
		if s := cc.GetState(); s != connectivity.TransientFailure {
			t.Errorf("while redialing after a failure: %v, want TRANSIENT_FAILURE", s)
		}
	})
}

// A READY channel whose server stops goes IDLE, as grpc-go's pick_first
// does when its connection is lost; Connect dials again.
func TestConnectivityServerStops(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		addr, stop := stoppableServer(t)
		cc := newStateConn(t, lean, "passthrough:///"+addr, stateOptions{backoff: 10 * time.Second})
		ctx := ctxT(t)
		if err := blockUntilReady(ctx, cc); err != nil {
			t.Fatal(err)
		}
		stop()
		if s := waitChange(t, cc, connectivity.Ready); s != connectivity.Idle {
			t.Fatalf("after the server stopped: %v, want IDLE", s)
		}
		cc.Connect()
		s := waitChange(t, cc, connectivity.Idle)
		if s == connectivity.Connecting {
			s = waitChange(t, cc, s)
		}
		if s != connectivity.TransientFailure {
			t.Fatalf("Connect without a server: %v, want TRANSIENT_FAILURE", s)
		}
	})
}

// Close: SHUTDOWN, and a WaitForStateChange in progress returns true; one
// from SHUTDOWN waits for its context.
func TestConnectivityClose(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		cc := newStateConn(t, lean, "passthrough:///"+leanTestServer(t), stateOptions{})
		if err := blockUntilReady(ctxT(t), cc); err != nil {
			t.Fatal(err)
		}
		changed := make(chan bool)
		go func() { changed <- cc.WaitForStateChange(ctxT(t), connectivity.Ready) }()
		time.Sleep(20 * time.Millisecond)
		cc.Close()
		select {
		case ok := <-changed:
			if !ok {
				t.Fatal("WaitForStateChange returned false on Close")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("WaitForStateChange did not return on Close")
		}
		if s := cc.GetState(); s != connectivity.Shutdown {
			t.Fatalf("after Close: %v, want SHUTDOWN", s)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if cc.WaitForStateChange(ctx, connectivity.Shutdown) {
			t.Fatal("WaitForStateChange(SHUTDOWN) returned true")
		}
		cc.Connect() // no effect after Close
		cc.ResetConnectBackoff()
		if s := cc.GetState(); s != connectivity.Shutdown {
			t.Fatalf("after Connect on a closed channel: %v, want SHUTDOWN", s)
		}
	})
}

// WaitForStateChange with a context that ends returns false, and returns
// true at once when the state already differs.
func TestConnectivityWaitContext(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		cc := newStateConn(t, lean, "passthrough:///"+leanTestServer(t), stateOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if cc.WaitForStateChange(ctx, connectivity.Idle) {
			t.Fatal("WaitForStateChange(IDLE) on an untouched channel returned true")
		}
		if !cc.WaitForStateChange(context.Background(), connectivity.Ready) {
			t.Fatal("WaitForStateChange(READY) on an IDLE channel returned false")
		}
	})
}

// The WithBlock idiom works on both stacks: READY against a live server,
// the context's error against a dead address.
func TestConnectivityBlockUntilReady(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		cc := newStateConn(t, lean, leanTestServer(t), stateOptions{})
		if err := blockUntilReady(ctxT(t), cc); err != nil {
			t.Fatalf("live server: %v", err)
		}
		dead := newStateConn(t, lean, deadAddr(t), stateOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := blockUntilReady(ctx, dead); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dead address: %v, want %v", err, context.DeadlineExceeded)
		}
		if s := dead.GetState(); s != connectivity.TransientFailure {
			t.Fatalf("dead address: %v, want TRANSIENT_FAILURE", s)
		}
	})
}

// WithIdleTimeout(200ms): an open stream keeps the channel READY; without
// calls it goes IDLE and closes its connection (leangrpc keeps no goroutine
// either); the next call leaves IDLE on a new connection.
func TestConnectivityIdleTimeout(t *testing.T) {
	const idle = 200 * time.Millisecond
	forClients(t, func(t *testing.T, lean bool) {
		addr := leanTestServer(t)
		base := runtime.NumGoroutine()
		d := &trackingDialer{}
		cc := newStateConn(t, lean, "passthrough:///"+addr, stateOptions{dialer: d, idleTimeout: idle})
		client := testgrpc.NewTestServiceClient(cc)
		ctx := ctxT(t)
		stream, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * idle)
		if s := cc.GetState(); s != connectivity.Ready {
			t.Fatalf("with a stream open for %v: %v, want READY", 4*idle, s)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != io.EOF {
			t.Fatalf("Recv: %v, want EOF", err)
		}
		start := time.Now()
		if s := waitChange(t, cc, connectivity.Ready); s != connectivity.Idle {
			t.Fatalf("without calls: %v, want IDLE", s)
		}
		if el := time.Since(start); el < idle {
			t.Errorf("IDLE %v after the last call, before the %v timeout", el, idle)
		}
		deadline := time.Now().Add(5 * time.Second)
		for d.open() > 0 || (lean && runtime.NumGoroutine() > base) {
			if time.Now().After(deadline) {
				t.Fatalf("IDLE with %d connections open and %d goroutines (%d before the channel)", d.open(), runtime.NumGoroutine(), base)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall after IDLE: %v", err)
		}
		if s := cc.GetState(); s != connectivity.Ready {
			t.Fatalf("after a call: %v, want READY", s)
		}
		if n := d.attempts.Load(); n != 2 {
			t.Errorf("%d dials, want 2 (one before IDLE, one after)", n)
		}
	})
}

// WithIdleTimeout(0) keeps a channel out of IDLE (the last option counts).
func TestConnectivityIdleTimeoutOff(t *testing.T) {
	c, err := leangrpc.NewClient(leanTestServer(t), leangrpc.WithIdleTimeout(50*time.Millisecond), leangrpc.WithIdleTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := blockUntilReady(ctxT(t), c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if c.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatalf("idle timeout off: state changed to %v", c.GetState())
	}
}

func equalStates(a, b []connectivity.State) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// In TRANSIENT_FAILURE the channel redials on its own after the backoff,
// as grpc-go's does: a server that comes up at the address makes it READY
// without a call.
func TestConnectivityRedialsInTransientFailure(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		addr := deadAddr(t)
		cc := newStateConn(t, lean, "passthrough:///"+addr, stateOptions{backoff: 50 * time.Millisecond})
		cc.Connect()
		s := waitChange(t, cc, connectivity.Idle)
		if s == connectivity.Connecting {
			s = waitChange(t, cc, s)
		}
		if s != connectivity.TransientFailure {
			t.Fatalf("dead address: %v, want TRANSIENT_FAILURE", s)
		}
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the address was taken meanwhile: %v", err)
		}
		srv := leangrpc.NewServer()
		testgrpc.RegisterTestServiceServer(srv, interop.NewTestServer())
		done := make(chan struct{})
		go func() { defer close(done); srv.Serve(lis) }()
		t.Cleanup(func() { srv.Stop(); <-done })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
			if !cc.WaitForStateChange(ctx, s) {
				t.Fatalf("still %v 10s after the server came up", s)
			}
		}
	})
}
