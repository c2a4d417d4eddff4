package leangrpc_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// Issue 6's promise, through the public API: a few hundred connections
// make one RPC each and go idle. With pooled reads (the default) the pool
// gets every buffer back and, on Linux, no goroutine is left per connection
// on either side; with pooling switched off each side keeps its reader.
func TestIdleConnectionsHoldNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("opens a few hundred connections")
	}
	const n = 200
	for _, pooled := range []bool{true, false} {
		t.Run(fmt.Sprintf("pooled=%v", pooled), func(t *testing.T) {
			sockio.StartIdlePoller() // process-wide, started before the baseline
			base := runtime.NumGoroutine()
			bufs := bufpool.Default().Outstanding()

			s := leangrpc.NewServer(leangrpc.ReadBufferPooling(pooled))
			testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan struct{})
			go func() { s.Serve(ln); close(served) }()

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conns := make([]*leangrpc.ClientConn, 0, n)
			for range n {
				cc, err := leangrpc.NewClient(ln.Addr().String(), leangrpc.WithReadBufferPooling(pooled))
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, cc)
				if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{}); err != nil {
					t.Fatalf("EmptyCall on connection %d: %v", len(conns), err)
				}
			}

			// Per connection: 0 goroutines when idle readers hand their
			// socket to the epoll waiter (Linux, pooled), else one reader
			// on each side. A few more run process-wide (the accept loop).
			perConn := 2
			if pooled && runtime.GOOS == "linux" {
				perConn = 0
			}
			const slack = 8
			wantAtMost := base + n*perConn + slack
			deadline := time.Now().Add(10 * time.Second)
			for runtime.NumGoroutine() > wantAtMost || (pooled && bufpool.Default().Outstanding() != bufs) {
				if time.Now().After(deadline) {
					t.Fatalf("after going idle: %d goroutines (baseline %d, want at most %d for %d connections); %d pooled buffers out (baseline %d)",
						runtime.NumGoroutine(), base, wantAtMost, n, bufpool.Default().Outstanding(), bufs)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if perConn > 0 && runtime.NumGoroutine() < base+n*perConn {
				t.Errorf("%d goroutines for %d connections without pooling: each side should keep its reader", runtime.NumGoroutine()-base, n)
			}

			// Idle connections still work.
			if _, err := testgrpc.NewTestServiceClient(conns[n/2]).EmptyCall(ctx, &testpb.Empty{}); err != nil {
				t.Fatalf("EmptyCall after idling: %v", err)
			}
			for _, cc := range conns {
				cc.Close()
			}
			s.Stop()
			<-served
			checkGoroutines(t, base)
			checkBuffers(t, bufs)
		})
	}
}
