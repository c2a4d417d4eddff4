package leangrpc_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// forClients runs f with a leangrpc client and with a grpc-go client,
// checking goroutines and pooled buffers afterwards.
func forClients(t *testing.T, f func(t *testing.T, lean bool)) {
	for _, lean := range []bool{true, false} {
		name := "grpc-client"
		if lean {
			name = "lean-client"
		}
		t.Run(name, func(t *testing.T) {
			base, bufs := baseline()
			t.Run("body", func(t *testing.T) { f(t, lean) })
			checkGoroutines(t, base)
			checkBuffers(t, bufs)
		})
	}
}

// leanTestServer starts a leangrpc test server on a loopback port and
// returns its address.
func leanTestServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return lis.Addr().String()
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// calledPeer makes one EmptyCall and returns the address it went to.
func calledPeer(t *testing.T, cc grpc.ClientConnInterface) (string, error) {
	var p peer.Peer
	_, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}, grpc.Peer(&p))
	if p.Addr == nil {
		return "", err
	}
	return p.Addr.String(), err
}

// TestResolverAddresses: with a resolver (given by WithResolvers) that
// lists a dead address before a live one, calls go to the live one; when
// it lists another server, new calls follow it.
func TestResolverAddresses(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		a, b, dead := leanTestServer(t), leanTestServer(t), deadAddr(t)
		r := manual.NewBuilderWithScheme("test")
		r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: dead}, {Addr: a}}})
		cc, err := newStackClient(lean, "test:///svc", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if got, err := calledPeer(t, cc); err != nil || got != a {
			t.Fatalf("first call went to %q (%v), want %q", got, err, a)
		}
		r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: b}}})
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := calledPeer(t, cc)
			if err != nil {
				t.Fatalf("call after the update: %v", err)
			}
			if got == b {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("calls still go to %q after the resolver listed only %q", got, b)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// countingBuilder builds resolvers that report a fixed state or error and
// count the ResolveNow and Close calls they get.
type countingBuilder struct {
	scheme     string
	state      *resolver.State // reported at Build and on ResolveNow, unless err
	err        error
	buildErr   error
	resolveNow atomic.Int32
	closed     atomic.Int32
}

func (b *countingBuilder) Scheme() string { return b.scheme }

func (b *countingBuilder) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	if b.buildErr != nil {
		return nil, b.buildErr
	}
	r := &countingResolver{b: b, cc: cc}
	r.report()
	return r, nil
}

type countingResolver struct {
	b  *countingBuilder
	cc resolver.ClientConn
}

func (r *countingResolver) report() {
	if r.b.err != nil {
		r.cc.ReportError(r.b.err)
	} else if r.b.state != nil {
		r.cc.UpdateState(*r.b.state)
	}
}

func (r *countingResolver) ResolveNow(resolver.ResolveNowOptions) {
	r.b.resolveNow.Add(1)
	r.report()
}

func (r *countingResolver) Close() { r.b.closed.Add(1) }

// TestResolverFailures: a resolver that fails, gives no addresses, or
// whose only address is dead makes a call fail with the status grpc-go's
// client gives in the same case.
func TestResolverFailures(t *testing.T) {
	dead := deadAddr(t)
	cases := []struct {
		name    string
		builder func() *countingBuilder
		target  string
	}{
		{"error", func() *countingBuilder { return &countingBuilder{scheme: "fail", err: errors.New("no such service")} }, "fail:///svc"},
		{"zero-addresses", func() *countingBuilder { return &countingBuilder{scheme: "fail", state: &resolver.State{}} }, "fail:///svc"},
		{"dead-address", func() *countingBuilder {
			return &countingBuilder{scheme: "fail", state: &resolver.State{Addresses: []resolver.Address{{Addr: dead}}}}
		}, "fail:///svc"},
		{"build-error", func() *countingBuilder { return &countingBuilder{scheme: "fail", buildErr: errors.New("bad target")} }, "fail:///svc"},
		{"unix-with-authority", func() *countingBuilder { return &countingBuilder{scheme: "unused"} }, "unix://host/tmp/x.sock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]*status.Status
			forClients(t, func(t *testing.T, lean bool) {
				cc, err := newStackClient(lean, tc.target, tc.builder())
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				_, err = testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{})
				i := 0
				if !lean {
					i = 1
				}
				got[i] = status.Convert(err)
			})
			l, g := got[0], got[1]
			if l == nil || g == nil {
				return
			}
			t.Logf("leangrpc: %v; grpc-go: %v", l, g)
			if l.Code() != g.Code() || l.Message() != g.Message() {
				t.Errorf("leangrpc: %v; grpc-go: %v", l, g)
			}
			if l.Code() == codes.OK {
				t.Errorf("the call succeeded")
			}
		})
	}
}

// TestResolverWaitForReady: a call with WaitForReady waits while the
// resolver fails and ends with its deadline, on both stacks; it goes
// through once the resolver lists a server.
func TestResolverWaitForReady(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		r := manual.NewBuilderWithScheme("test")
		r.InitialState(resolver.State{})
		cc, err := newStackClient(lean, "test:///svc", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		tc := testgrpc.NewTestServiceClient(cc)
		ctx, cancel := context.WithTimeout(ctxT(t), 50*time.Millisecond)
		_, err = tc.EmptyCall(ctx, &testpb.Empty{}, grpc.WaitForReady(true))
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("WaitForReady call without addresses: %v, want DeadlineExceeded", err)
		}
		addr := leanTestServer(t)
		done := make(chan error, 1)
		go func() {
			_, err := tc.EmptyCall(ctxT(t), &testpb.Empty{}, grpc.WaitForReady(true))
			done <- err
		}()
		time.Sleep(10 * time.Millisecond)
		r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: addr}}})
		if err := <-done; err != nil {
			t.Fatalf("WaitForReady call after the resolver listed a server: %v", err)
		}
	})
}

// TestResolverLifecycle: a failed connection makes the client ask its
// resolver again (ResolveNow), and Close closes the resolver, on both
// stacks.
func TestResolverLifecycle(t *testing.T) {
	forClients(t, func(t *testing.T, lean bool) {
		b := &countingBuilder{scheme: "count", state: &resolver.State{Addresses: []resolver.Address{{Addr: deadAddr(t)}}}}
		cc, err := newStackClient(lean, "count:///svc", b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}); status.Code(err) != codes.Unavailable {
			t.Errorf("call to a dead address: %v, want Unavailable", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for b.resolveNow.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if b.resolveNow.Load() == 0 {
			t.Errorf("no ResolveNow after the connection failed")
		}
		cc.Close()
		for b.closed.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if n := b.closed.Load(); n != 1 {
			t.Errorf("resolver closed %d times after Close, want 1", n)
		}
	})
}
