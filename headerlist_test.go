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
// went out. Both implementations check the peer's limit before they
// send, so a call over it fails alone and the connection lives on.
func TestMaxHeaderListSize(t *testing.T) {
	const limit = 2000
	big := strings.Repeat("x", 2*limit)
	forAllPairs(t, func(t *testing.T, p pair) {
		t.Run("server-limit", func(t *testing.T) {
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
			// Both clients check the server's limit before sending.
			want := "header list size to send violates the maximum size (2000 bytes) set by server"
			if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != want {
				t.Errorf("request over the server's limit: %v, want Internal %q", err, want)
			}
		})
		t.Run("client-limit", func(t *testing.T) {
			tc := startTestService(t, p, stackOptions{
				leanDial: []leangrpc.DialOption{leangrpc.WithMaxHeaderListSize(limit)},
				grpcDial: []grpc.DialOption{grpc.WithMaxHeaderListSize(limit)},
			})
			if _, err := tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{}); err != nil {
				t.Fatalf("small response: %v", err)
			}
			// The interop server echoes this field in its response
			// headers.
			ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-grpc-test-echo-initial", big)
			// Both servers check the client's limit before sending and
			// reset the stream with INTERNAL_ERROR.
			_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{})
			want := "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"
			if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != want {
				t.Errorf("response header list over the client's limit: %v, want Internal", err)
			}
			// The connection survives: the next call passes.
			if _, err := tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{}); err != nil {
				t.Errorf("call after the refused one: %v", err)
			}
		})
	})
}
