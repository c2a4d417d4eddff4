package leangrpc_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// TestInvokeEndedContext: a unary call whose context has already
// ended (the client's waits watch Done instead of an AfterFunc) fails with
// the context's code, for small and large requests, and leaves nothing
// behind; the connection then serves the next call.
func TestInvokeEndedContext(t *testing.T) {
	sockio.StartIdlePoller()
	for _, p := range []pair{pairs[0], pairs[2]} {
		t.Run(p.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			bufs := bufpool.Default().Outstanding()
			t.Run("body", func(t *testing.T) {
				e := setup(t, p, serverSettings{}, clientSettings{})
				if _, err := e.tc.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
					t.Fatal(err)
				}
				canceled, cancel := context.WithCancel(context.Background())
				cancel()
				expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
				defer cancel2()
				for _, size := range []int{0, 1 << 10, 1 << 20} {
					req := &testpb.SimpleRequest{Payload: payload(size), ResponseSize: 10}
					if _, err := e.tc.UnaryCall(canceled, req); status.Code(err) != codes.Canceled {
						t.Errorf("canceled context, %d-byte request: %v", size, err)
					}
					if _, err := e.tc.UnaryCall(expired, req); status.Code(err) != codes.DeadlineExceeded {
						t.Errorf("expired context, %d-byte request: %v", size, err)
					}
				}
				if _, err := e.tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 100 << 10}); err != nil {
					t.Errorf("call after the ended ones: %v", err)
				}
				e.stop()
			})
			checkGoroutines(t, base)
			checkBuffers(t, bufs)
		})
	}
}
