package leangrpc_test

import (
	"encoding/binary"
	"math"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
)

// Slow readers: peers that ask for large responses and then do not take
// them, by granting no window or by not reading the socket at all.

// sendingService answers StreamingOutputCall with 256 KiB messages until
// a send fails, then reports whether the handler's context had ended.
type sendingService struct {
	testgrpc.TestServiceServer
	started chan struct{}
	ended   chan bool // the context ended by the time the failed send returned, or soon after
}

func (s *sendingService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	s.started <- struct{}{}
	body := make([]byte, 256<<10)
	for {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
			select {
			case <-stream.Context().Done():
				s.ended <- true
			case <-time.After(attackWait):
				s.ended <- false
			}
			return err
		}
	}
}

// slowReaderTarget starts a server with the sendingService.
func slowReaderTarget(t *testing.T, streams int) (*target, *sendingService, *leangrpc.Server) {
	t.Helper()
	sockio.StartIdlePoller()
	runtime.GC()
	base := runtime.NumGoroutine()
	bufs := bufpool.Default().Outstanding()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &sendingService{TestServiceServer: interop.NewTestServer(), started: make(chan struct{}, streams), ended: make(chan bool, streams)}
	s := leangrpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, svc)
	go s.Serve(lis)
	t.Cleanup(func() {
		s.Stop()
		checkGoroutines(t, base)
		checkBuffers(t, bufs)
	})
	return &target{addr: lis.Addr().String()}, svc, s
}

const streamingOutputPath = "/grpc.testing.TestService/StreamingOutputCall"

// openSending opens n StreamingOutputCall streams on p and waits for their
// handlers to start.
func openSending(t *testing.T, p *h2test.Peer, svc *sendingService, n int) {
	t.Helper()
	var b []byte
	for i := range n {
		id := uint32(1 + 2*i)
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders, id, requestBlock(streamingOutputPath))
		b = h2test.AppendFrame(b, h2frame.TypeData, h2frame.FlagEndStream, id, grpcFrame(0, nil))
	}
	p.WriteBytes(b)
	for range n {
		select {
		case <-svc.started:
		case <-time.After(attackWait):
			t.Fatal("the handlers did not start")
		}
	}
}

// wantHandlersEnded waits for n handlers to return after a failed send,
// each having seen its context end.
func wantHandlersEnded(t *testing.T, svc *sendingService, n int) {
	t.Helper()
	for range n {
		select {
		case ok := <-svc.ended:
			if !ok {
				t.Error("a handler's send failed and its context did not end")
			}
		case <-time.After(attackWait):
			t.Fatal("handlers blocked in SendMsg still run after the connection closed")
		}
	}
}

// TestAttackSlowReaderZeroWindow: a peer that asks for endless responses on
// streams with a window of zero. Each handler blocks in SendMsg holding at
// most the message it sends; when the connection closes (the peer leaves,
// or the server stops) every handler's send fails and its context ends.
func TestAttackSlowReaderZeroWindow(t *testing.T) {
	for _, stop := range []bool{false, true} {
		const streams = 16
		tg, svc, s := slowReaderTarget(t, streams)
		p := tg.peer(t, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 0})
		bufs := bufpool.Default().Outstanding()
		openSending(t, p, svc, streams)
		time.Sleep(200 * time.Millisecond) // the handlers block in Send
		if held := bufpool.Default().Outstanding() - bufs; held > 2*streams {
			t.Errorf("%d handlers sending to a zero window hold %d pool buffers", streams, held)
		}
		if stop {
			s.Stop()
		} else {
			p.Conn.Close()
		}
		wantHandlersEnded(t, svc, streams)
	}
}

// TestAttackSlowReaderNoSocketReads: a peer that grants every window and
// never reads its socket. The handlers' sends fill the socket buffers and
// block there, holding at most the message each sends; when the peer
// leaves, every handler's send fails and its context ends.
func TestAttackSlowReaderNoSocketReads(t *testing.T) {
	const streams = 16
	tg, svc, _ := slowReaderTarget(t, streams)
	p := tg.peer(t, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: math.MaxInt32})
	p.WriteWindowUpdate(0, math.MaxInt32-h2frame.DefaultInitialWindow)
	bufs := bufpool.Default().Outstanding()
	before := heapInUse()
	openSending(t, p, svc, streams)
	time.Sleep(300 * time.Millisecond) // the sends fill the socket buffers
	held := bufpool.Default().Outstanding() - bufs
	grown := heapInUse() - before
	t.Logf("%d handlers sending to a peer that does not read: %d pool buffers, %d KiB more heap", streams, held, grown>>10)
	// Bounds in proportion to the handlers, not to what they sent (a
	// send path that queued would hold hundreds of MiB by now), with room
	// for the buffers and garbage of the process's other connections,
	// which a loaded machine (the race detector) leaves for longer.
	if held > 2*streams+16 {
		t.Errorf("%d handlers sending to a peer that does not read hold %d pool buffers", streams, held)
	}
	if grown > 6*streams*(256<<10) {
		t.Errorf("%d handlers sending to a peer that does not read hold %d KiB more heap", streams, grown>>10)
	}
	p.Conn.Close()
	wantHandlersEnded(t, svc, streams)
}

// TestAttackPingFloodNoReads: CVE-2019-9512 against a server whose policy
// permits the pings: a peer that sends PINGs without end and reads none of
// the ACKs. The ACKs queued for it are bounded (maxQueuedControlFrames):
// GOAWAY ENHANCE_YOUR_CALM, or the close alone when the GOAWAY does not
// fit in the socket the peer does not read.
func TestAttackPingFloodNoReads(t *testing.T) {
	tg := attackTarget(t, leangrpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Nanosecond, PermitWithoutStream: true}))
	p := tg.peer(t)
	bufs := bufpool.Default().Outstanding()
	var b []byte
	for i := range 1_000_000 {
		b = h2test.AppendFrame(b, h2frame.TypePing, 0, 0, binary.BigEndian.AppendUint64(nil, uint64(i)))
	}
	n := <-flood(p.Conn, b)
	if held := bufpool.Default().Outstanding() - bufs; held > 64 {
		t.Errorf("a PING flood of %d bytes left %d pool buffers held", n, held)
	}
	if n == len(b) {
		t.Errorf("the server read all %d PINGs of a peer that reads none of the ACKs", len(b)/17)
	}
	wantGoAwayOrEnd(t, p, h2frame.ErrCodeEnhanceYourCalm)
	tg.legit(t)
}
