package leangrpc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// Calls share their incoming metadata map while
// their fields are the same (grpcwire.MDCache): each call still sees its
// own fields, whatever its neighbours send and whatever a handler does to
// the copy FromIncomingContext gives it.
func TestIncomingMetadataPerCall(t *testing.T) {
	// An interceptor that writes to its copy, as some do before calling
	// on: the next calls must not see it.
	scribble := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			md.Set("x-grpc-test-echo-initial", "scribbled")
			md.Append("k", "scribbled")
		}
		return h(ctx, req)
	}
	addr, stop := startServer(t, true, serverSettings{unary: []grpc.UnaryServerInterceptor{scribble}})
	defer stop()
	cc, closeCC := newClient(t, true, addr, clientSettings{})
	defer closeCC()
	tc := testgrpc.NewTestServiceClient(cc)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				// Two workers send the same value each time (shared
				// maps), two a new one per call.
				v := fmt.Sprintf("w%d", w%2)
				if w >= 2 {
					v = fmt.Sprintf("w%d-%d", w, i)
				}
				ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-grpc-test-echo-initial", v)
				var hdr metadata.MD
				if _, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&hdr)); err != nil {
					t.Error(err)
					return
				}
				if got := hdr.Get("x-grpc-test-echo-initial"); len(got) != 1 || got[0] != v {
					t.Errorf("call with %q: the handler saw %q", v, got)
					return
				}
			}
		}()
	}
	wg.Wait()
}
