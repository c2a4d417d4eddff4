package leangrpc_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestPrefixOnlyStreamsHoldLittleMemory: a client that opens streams and
// sends on each only a 5-byte message prefix announcing ~4 MiB (the default
// MaxRecvMsgSize) must not make the server reserve the announced size per
// stream (16 streams, 224 bytes of DATA, 64 MiB): like grpc-go, it holds
// only what arrived.
func TestPrefixOnlyStreamsHoldLittleMemory(t *testing.T) {
	prefixOnly(t, scriptedClient(t))
}

func prefixOnly(t *testing.T, p *h2test.Peer) {
	const streams = 16
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	for i := range streams {
		id := uint32(2*i + 1)
		p.WriteHeaders(id, false, request("/grpc.testing.TestService/StreamingInputCall")...)
		pre := grpcFrame(0, nil)
		pre[1], pre[2], pre[3], pre[4] = 0x00, 0x3f, 0xff, 0xf0 // 4 MiB - 16
		p.WriteData(id, false, pre)
	}
	time.Sleep(300 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grown := int64(ms.HeapInuse) - int64(before)
	t.Logf("heap in use grew by %d MiB for %d prefix-only streams", grown>>20, streams)
	if grown > 16<<20 {
		t.Errorf("%d streams of 5 DATA bytes each made the server hold %d MiB", streams, grown>>20)
	}
	for i := range streams {
		p.WriteRST(uint32(2*i+1), h2frame.ErrCodeCancel)
	}
}

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
