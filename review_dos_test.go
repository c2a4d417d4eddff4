package leangrpc_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// TestReviewPrefixOnlyStreamsHoldMemory: a client that opens streams and
// sends on each only a 5-byte message prefix announcing ~4 MiB (the default
// MaxRecvMsgSize) makes the server hold a 4 MiB buffer per stream: 16
// streams, 224 bytes of DATA, 64 MiB held. grpc-go holds what arrived.
func TestReviewPrefixOnlyStreamsHoldMemory(t *testing.T) {
	prefixOnly(t, scriptedClient(t))
}

// TestReviewPrefixOnlyStreamsGRPCGo is the same against grpc-go's server
// (the reference: it passes).
func TestReviewPrefixOnlyStreamsGRPCGo(t *testing.T) {
	addr, stop := startServer(t, false, serverSettings{})
	t.Cleanup(stop)
	prefixOnly(t, scriptedTo(t, addr))
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
