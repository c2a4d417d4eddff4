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

// What idle connections hold, through the public API: a few hundred
// connections make one RPC each and go idle. With pooled reads (the
// default) and the idle poller (the Linux fast path), the pool gets every
// buffer back and no goroutine is left per connection on either side.
// Otherwise each side keeps its reader parked in Read (pooling switched
// off, or the portable path), holding at most one pooled read buffer (the
// portable path with pooling on); all of it comes back at Close.
func TestIdleConnectionsHoldNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("opens a few hundred connections")
	}
	const n = 200
	for _, pooled := range []bool{true, false} {
		t.Run(fmt.Sprintf("pooled=%v", pooled), func(t *testing.T) {
			poller := sockio.StartIdlePoller() == nil // process-wide, started before the baseline
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

			// Per connection: 0 goroutines and buffers when idle readers
			// hand their socket to the idle poller (pooled, Linux fast
			// path), else one reader on each side, holding a pooled read
			// buffer when pooling is on. A few more goroutines run
			// process-wide (the accept loop).
			perConn, bufsPerConn := 2, 0
			if pooled && poller {
				perConn = 0
			} else if pooled {
				bufsPerConn = 2
			}
			const slack = 8
			wantAtMost := base + n*perConn + slack
			deadline := time.Now().Add(10 * time.Second)
			for runtime.NumGoroutine() > wantAtMost || (pooled && bufpool.Default().Outstanding() > bufs+int64(n*bufsPerConn)) {
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
