package leangrpc_test

import (
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestMetadataValidation sends metadata HTTP/2 cannot carry (a key with a
// space, a value with a line break) from both clients, and from a handler
// on both servers (a header key): each is refused with grpc-go's Internal error before
// it reaches the wire, where the peer would reset the stream. Binary
// values pass.
func TestMetadataValidation(t *testing.T) {
	bad := []struct {
		k, v, msg string
	}{
		{"bad key", "v", `header key "bad key" contains illegal characters not in [0-9a-z-_.]`},
		{"k", "line\nbreak", `header key "k" contains value with non-printable ASCII characters`},
	}
	sendBadHeader := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if k := md.Get("x-send-key"); len(k) == 1 {
			return ss.SendHeader(metadata.MD{k[0]: md.Get("x-send-value")})
		}
		return h(srv, ss)
	}
	forAllPairs(t, func(t *testing.T, p pair) {
		tc := startTestService(t, p, stackOptions{
			leanServer: []leangrpc.ServerOption{leangrpc.StreamInterceptor(sendBadHeader)},
			grpcServer: []grpc.ServerOption{grpc.StreamInterceptor(sendBadHeader)},
		})
		for _, b := range bad {
			ctx := metadata.AppendToOutgoingContext(ctxT(t), b.k, b.v)
			_, err := tc.EmptyCall(ctx, &testpb.Empty{})
			if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != b.msg {
				t.Errorf("client metadata %q: %v, want Internal %q", b.k, err, b.msg)
			}
		}
		if _, err := tc.EmptyCall(metadata.AppendToOutgoingContext(ctxT(t), "k-bin", "\x00\n\x01"), &testpb.Empty{}); err != nil {
			t.Errorf("binary metadata: %v", err)
		}
		// A handler sending a header key HTTP/2 cannot carry.
		ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-send-key", "bad key", "x-send-value", "v")
		stream, err := tc.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != bad[0].msg {
			t.Errorf("handler's header key: %v, want Internal %q", err, bad[0].msg)
		}
	})
}
