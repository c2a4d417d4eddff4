package leangrpc_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"

	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/leangrpc/leangrpc"
)

// keepingServer echoes every request's payload and keeps the requests, as
// an application that holds on to what it received.
type keepingServer struct {
	testgrpc.UnimplementedTestServiceServer
	mu   sync.Mutex
	kept []*testpb.StreamingOutputCallRequest
}

func (s *keepingServer) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.kept = append(s.kept, req)
		s.mu.Unlock()
		// The aliased bytes go out again as they are.
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.Payload}); err != nil {
			return err
		}
	}
}

// patterned is n bytes that differ by seed and by position.
func patterned(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>9)
	}
	return b
}

// echoLarge runs one stream that sends n messages of size bytes, seeded
// from seed, through a fresh server and client, and returns what the
// server kept and what the client received; server and client are gone
// when it returns.
func echoLarge(t *testing.T, seed byte, n, size int, opts ...leangrpc.ServerOption) (kept []*testpb.StreamingOutputCallRequest, got []*testpb.StreamingOutputCallResponse) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	impl := &keepingServer{}
	s := leangrpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(s, impl)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	defer func() { s.Stop(); <-done }()
	cc, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := testgrpc.NewTestServiceClient(cc).FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		req := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: patterned(seed+byte(i), size)}}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	impl.mu.Lock()
	defer impl.mu.Unlock()
	return impl.kept, got
}

// TestAliasedFieldsOutliveTheirCall: large bytes fields received on both
// sides alias the buffers they arrived in, and those buffers never go
// back to the pool. The messages stay intact after their stream, client
// and server are gone and other calls have taken and freed many buffers
// of the same size. Under the leangrpcdebug tag (CI runs this test with
// it) every buffer freed to the pool is poisoned, so a buffer that went
// back while a message still pointed into it shows here.
func TestAliasedFieldsOutliveTheirCall(t *testing.T) {
	const n, size = 8, 256 << 10
	kept, got := echoLarge(t, 1, n, size)
	for range 3 {
		echoLarge(t, 100, 2*n, size) // churns buffers of the same sizes
		runtime.GC()
	}
	if len(kept) != n || len(got) != n {
		t.Fatalf("server kept %d messages, client received %d; want %d each", len(kept), len(got), n)
	}
	for i := range n {
		want := patterned(1+byte(i), size)
		for side, body := range map[string][]byte{"server": kept[i].GetPayload().GetBody(), "client": got[i].GetPayload().GetBody()} {
			if !bytes.Equal(body, want) {
				t.Errorf("%s: message %d changed after its call ended", side, i)
			}
			if cap(body) != len(body) {
				t.Errorf("%s: message %d: field capacity %d, length %d: an append would write past the field", side, i, cap(body), len(body))
			}
		}
	}
}

// TestAliasBytesOff: with the rollback switch off, large fields arrive the
// same (decoded by grpc-go's proto codec as it is).
func TestAliasBytesOff(t *testing.T) {
	kept, got := echoLarge(t, 7, 2, 64<<10, leangrpc.AliasBytes(false))
	for i := range 2 {
		want := patterned(7+byte(i), 64<<10)
		if !bytes.Equal(kept[i].GetPayload().GetBody(), want) || !bytes.Equal(got[i].GetPayload().GetBody(), want) {
			t.Errorf("message %d differs", i)
		}
	}
}
