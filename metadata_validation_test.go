package leangrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestOutgoingMetadataValidated: a client refuses outgoing metadata that
// cannot be sent with Internal and grpc-go's message, before anything is
// sent; keys the metadata helpers lowercase are sent lowercased, and a
// -bin value may hold any bytes. (An uppercase key in an MD map built by
// hand is where the stacks differ: grpc-go's client sees the map as
// attached, through a hook internal to grpc-go, and refuses it; leangrpc
// reads it through metadata.FromOutgoingContext, which lowercases it, and
// sends it.)
func TestOutgoingMetadataValidated(t *testing.T) {
	bg := context.Background()
	cases := []struct {
		name string
		ctx  context.Context
		want string // "" when the call goes through
		key  string // sent under this key, as value
		val  string
	}{
		{"Pairs upper key", metadata.NewOutgoingContext(bg, metadata.Pairs("Upper", "v")), "", "upper", "v"},
		{"appended upper key", metadata.AppendToOutgoingContext(bg, "Upper", "v"), "", "upper", "v"},
		{"space in key", metadata.NewOutgoingContext(bg, metadata.Pairs("a key", "v")), `header key "a key" contains illegal characters not in [0-9a-z-_.]`, "", ""},
		{"appended space in key", metadata.AppendToOutgoingContext(bg, "a key", "v"), `header key "a key" contains illegal characters not in [0-9a-z-_.]`, "", ""},
		{"empty key", metadata.NewOutgoingContext(bg, metadata.MD{"": {"v"}}), "there is an empty key in the header", "", ""},
		{"non-ASCII value", metadata.NewOutgoingContext(bg, metadata.Pairs("key", "vä")), `header key "key" contains value with non-printable ASCII characters`, "", ""},
		{"newline in value", metadata.AppendToOutgoingContext(bg, "key", "a\nb"), `header key "key" contains value with non-printable ASCII characters`, "", ""},
		{"binary value", metadata.NewOutgoingContext(bg, metadata.Pairs("key-bin", "ä\n\x00")), "", "key-bin", "ä\n\x00"},
	}
	forStacks(t, func(t *testing.T, client, server stack) {
		var calls atomic.Int32
		srv := serveOn(t, server.lean, streamService(func(_ any, stream grpc.ServerStream) error {
			calls.Add(1)
			md, _ := metadata.FromIncomingContext(stream.Context())
			return stream.SendMsg(&testpb.SimpleResponse{Username: string(mdPairs(md))})
		}), struct{}{})
		cc := dialOn(t, client.lean, srv.addr)
		for _, tc := range cases {
			ctx, cancel := context.WithTimeout(tc.ctx, 10*time.Second)
			before := calls.Load()
			var reply testpb.SimpleResponse
			cs, err := cc.NewStream(ctx, bidiDesc, streamMethod)
			if err == nil {
				cs.CloseSend()
				err = cs.RecvMsg(&reply)
			}
			cancel()
			if tc.want != "" {
				if status.Code(err) != codes.Internal || status.Convert(err).Message() != tc.want {
					t.Errorf("%s: %v, want Internal %q", tc.name, err, tc.want)
				}
				if calls.Load() != before {
					t.Errorf("%s: the server got the call", tc.name)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			if want := tc.key + "=" + tc.val + ";"; !containsPair(reply.GetUsername(), want) {
				t.Errorf("%s: the server received %q, want %q among it", tc.name, reply.GetUsername(), want)
			}
		}
	})
}

// mdPairs flattens md's custom pairs as "k=v;" for the client to check.
func mdPairs(md metadata.MD) []byte {
	var b []byte
	for k, vv := range md {
		for _, v := range vv {
			b = append(b, k+"="+v+";"...)
		}
	}
	return b
}

func containsPair(s, pair string) bool {
	for i := 0; i+len(pair) <= len(s); i++ {
		if s[i:i+len(pair)] == pair {
			return true
		}
	}
	return false
}

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
