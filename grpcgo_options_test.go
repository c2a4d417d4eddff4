package leangrpc_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// TestGRPCGoOptionNamesAccepted builds a server and a client with every
// option grpc-go has that leangrpc accepts without effect or maps onto
// its own, as converted code passes them, and runs a call.
func TestGRPCGoOptionNamesAccepted(t *testing.T) {
	_, addr := serve(t,
		leangrpc.WriteBufferSize(64<<10), leangrpc.ReadBufferSize(64<<10),
		leangrpc.SharedWriteBuffer(true), leangrpc.NumStreamWorkers(4),
		leangrpc.MaxMsgSize(1<<20), leangrpc.HeaderTableSize(8192),
		leangrpc.StaticStreamWindowSize(1<<20), leangrpc.StaticConnWindowSize(1<<22),
	)
	cc, err := leangrpc.NewClient(addr, leangrpc.WithInsecure(),
		leangrpc.WithWriteBufferSize(0), leangrpc.WithReadBufferSize(0),
		leangrpc.WithSharedWriteBuffer(true), leangrpc.WithNoProxy(),
		leangrpc.WithDisableServiceConfig(), leangrpc.WithDisableHealthCheck(),
		leangrpc.WithDisableRetry(), leangrpc.WithBlock(), leangrpc.WithReturnConnectionError(),
		leangrpc.FailOnNonTempDialError(true), leangrpc.WithTimeout(time.Second),
		leangrpc.WithStaticStreamWindowSize(1<<20), leangrpc.WithStaticConnWindowSize(1<<22),
		leangrpc.WithBackoffMaxDelay(time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 100 << 10, Payload: payload(100 << 10)}); err != nil {
		t.Fatal(err)
	}
}

// TestWithDialerAndConnectParams checks the deprecated WithDialer (the
// dialer gets the attempt's time left) and WithConnectParams: after a
// failed dial, a 10ms base delay lets the next call dial again at once
// where the default backoff (1s) would fail it without dialing.
func TestWithDialerAndConnectParams(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens: every dial fails
	for _, fast := range []bool{false, true} {
		var dials atomic.Int32
		var timeout atomic.Int64
		opts := []leangrpc.DialOption{leangrpc.WithDialer(func(a string, d time.Duration) (net.Conn, error) {
			dials.Add(1)
			timeout.Store(int64(d))
			return net.DialTimeout("tcp", a, d)
		})}
		if fast {
			opts = append(opts, leangrpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond},
				MinConnectTimeout: 5 * time.Second,
			}))
		}
		cc, err := leangrpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		tc := testgrpc.NewTestServiceClient(cc)
		for i := 0; i < 2; i++ {
			if _, err := tc.EmptyCall(ctxT(t), &testpb.Empty{}); status.Code(err) != codes.Unavailable {
				t.Errorf("call %d to nothing: %v", i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cc.Close()
		// With the fast backoff the ClientConn also redials on its own
		// in TRANSIENT_FAILURE, as grpc-go's does, so it dials at least
		// once per call.
		if n := dials.Load(); (!fast && n != 1) || (fast && n < 2) {
			t.Errorf("fast backoff %v: %d dials, want %s", fast, n, map[bool]string{false: "1", true: "2 or more"}[fast])
		}
		if d := time.Duration(timeout.Load()); d <= 0 || d > 20*time.Second {
			t.Errorf("the dialer was given %v", d)
		}
	}
}

// TestWaitForHandlers checks that Stop waits for handlers with
// WaitForHandlers(true), as grpc-go's does, and not without.
func TestWaitForHandlers(t *testing.T) {
	for _, wait := range []bool{false, true} {
		started := make(chan struct{})
		var returned atomic.Bool
		slow := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			close(started)
			<-ctx.Done() // Stop cancels the call
			time.Sleep(500 * time.Millisecond)
			returned.Store(true)
			return nil, ctx.Err()
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := leangrpc.NewServer(leangrpc.UnaryInterceptor(slow), leangrpc.WaitForHandlers(wait))
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		go s.Serve(lis)
		cc := leanClient(t, lis.Addr().String())
		go cc.EmptyCall(ctxT(t), &testpb.Empty{})
		<-started
		s.Stop()
		if returned.Load() != wait {
			t.Errorf("WaitForHandlers(%v): the handler had returned when Stop did: %v", wait, returned.Load())
		}
		for !returned.Load() {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestWithMaxMsgSize checks the deprecated dial option: a default limit
// on received messages.
func TestWithMaxMsgSize(t *testing.T) {
	_, addr := serve(t)
	cc, err := leangrpc.NewClient(addr, leangrpc.WithMaxMsgSize(100))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 1000}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("response over WithMaxMsgSize: %v, want ResourceExhausted", err)
	}
}
