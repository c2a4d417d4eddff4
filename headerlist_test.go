package leangrpc_test

import (
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestMaxHeaderListSize sets a 2000-byte header list limit on the server
// (MaxHeaderListSize) and on the client (WithMaxHeaderListSize) in the
// four pairings: a request or response header list over it fails the
// call, a small one passes. A grpc-go peer checks the limit we announce
// before it sends (the client with its own message naming the limit, the
// server with RST_STREAM INTERNAL_ERROR), which shows the SETTINGS value
// went out.
func TestMaxHeaderListSize(t *testing.T) {
	const limit = 2000
	big := strings.Repeat("x", 2*limit)
	for _, p := range allPairs {
		t.Run(p.name+"/server-limit", func(t *testing.T) {
			tc := startTestService(t, p, stackOptions{
				leanServer: []leangrpc.ServerOption{leangrpc.MaxHeaderListSize(limit)},
				grpcServer: []grpc.ServerOption{grpc.MaxHeaderListSize(limit)},
			})
			if _, err := tc.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
				t.Fatalf("small request: %v", err)
			}
			ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-big", big)
			_, err := tc.EmptyCall(ctx, &testpb.Empty{})
			if status.Code(err) == codes.OK {
				t.Fatal("a request header list over the server's limit passed")
			}
			if !p.leanClient {
				want := "header list size to send violates the maximum size (2000 bytes) set by server"
				if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != want {
					t.Errorf("grpc-go client: %v, want Internal %q", err, want)
				}
			}
		})
		t.Run(p.name+"/client-limit", func(t *testing.T) {
			tc := startTestService(t, p, stackOptions{
				leanDial: []leangrpc.DialOption{leangrpc.WithMaxHeaderListSize(limit)},
				grpcDial: []grpc.DialOption{grpc.WithMaxHeaderListSize(limit)},
			})
			if _, err := tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{}); err != nil {
				t.Fatalf("small response: %v", err)
			}
			if !p.leanClient && p.leanServer {
				// leangrpc's server does not check the client's limit
				// before it sends, and grpc-go's client fails the
				// connection on a header block over its limit.
				return
			}
			// The interop server echoes this field in its response
			// headers.
			ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-grpc-test-echo-initial", big)
			_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{})
			if status.Code(err) != codes.Internal {
				t.Errorf("response header list over the client's limit: %v, want Internal", err)
			}
		})
	}
}
