package leangrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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
