package leangrpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// scriptedClient connects a scripted HTTP/2 client to a leangrpc server.
func scriptedClient(t *testing.T) *h2test.Peer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := h2test.NewPeer(t, c, h2test.ClientRole)
	p.Greet()
	return p
}

func request(path string, extra ...string) []string {
	return append([]string{":method", "POST", ":scheme", "http", ":path", path, ":authority", "x",
		"content-type", "application/grpc", "te", "trailers"}, extra...)
}

func TestWireServerResetsNoErrorAfterEarlyStatus(t *testing.T) {
	p := scriptedClient(t)
	p.WriteHeaders(1, false, request("/grpc.testing.TestService/NoSuchMethod")...)
	h := p.WantHeaders(1)
	if !h.EndStream || h.Get(":status") != "200" || h.Get("grpc-status") != "12" || h.Get("content-type") != "application/grpc" {
		t.Fatalf("want a Trailers-Only Unimplemented response, got %s", h2test.FormatFields(h.Fields))
	}
	p.WantRST(1, h2frame.ErrCodeNo)
}

func TestWireServerNoResetWhenClientHalfClosed(t *testing.T) {
	p := scriptedClient(t)
	p.WriteHeaders(1, false, request("/grpc.testing.TestService/EmptyCall")...)
	p.WriteData(1, true, grpcFrame(0, nil))
	h := p.WantHeaders(1)
	if h.EndStream || h.Get(":status") != "200" {
		t.Fatalf("response headers %s", h2test.FormatFields(h.Fields))
	}
	body, tr := p.WantBodyTrailers(1, true)
	if string(body) != string(grpcFrame(0, nil)) || tr.Get("grpc-status") != "0" {
		t.Fatalf("body %x trailers %s", body, h2test.FormatFields(tr.Fields))
	}
	p.WantNothing(100 * time.Millisecond) // no RST_STREAM: the stream closed cleanly
}

func TestWireServerDeadlineResetsWithCancel(t *testing.T) {
	p := scriptedClient(t)
	// FullDuplexCall waits for the client: the deadline passes first.
	p.WriteHeaders(1, false, request("/grpc.testing.TestService/FullDuplexCall", "grpc-timeout", "50m")...)
	p.WantRST(1, h2frame.ErrCodeCancel)
}

func TestWireServerTimeoutAndBinaryMetadataErrors(t *testing.T) {
	p := scriptedClient(t)
	p.WriteHeaders(1, true, request("/grpc.testing.TestService/EmptyCall", "grpc-timeout", "1x")...)
	h := p.WantHeaders(1)
	if h.Get(":status") != "400" || h.Get("grpc-status") != "13" {
		t.Errorf("bad grpc-timeout: %s", h2test.FormatFields(h.Fields))
	}
	p.WriteHeaders(3, true, request("/grpc.testing.TestService/EmptyCall", "x-bin", "!!!")...)
	h = p.WantHeaders(3)
	if h.Get(":status") != "400" || h.Get("grpc-status") != "13" {
		t.Errorf("bad binary metadata: %s", h2test.FormatFields(h.Fields))
	}
	// A message over the receive limit: RESOURCE_EXHAUSTED, decided from
	// the prefix alone.
	p.WriteHeaders(5, false, request("/grpc.testing.TestService/UnaryCall")...)
	big := grpcFrame(0, nil)
	big[1] = 0x10 // 256 MiB announced, nothing sent
	p.WriteData(5, false, big)
	h = p.WantHeaders(5)
	if h.Get("grpc-status") != "8" {
		t.Errorf("oversized message: %s", h2test.FormatFields(h.Fields))
	}
}

// scriptedServer connects a leangrpc client to a scripted HTTP/2 server.
func scriptedServer(t *testing.T) (testgrpc.TestServiceClient, func() *h2test.Peer) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	c := leanClient(t, lis.Addr().String())
	accept := func() *h2test.Peer {
		nc, err := lis.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		p := h2test.NewPeer(t, nc, h2test.ServerRole)
		p.Ignore[h2frame.TypeData] = true // request bodies do not matter here
		p.Greet()
		return p
	}
	return c, accept
}

func TestWireClientStatusFromRST(t *testing.T) {
	tests := []struct {
		code h2frame.ErrCode
		want codes.Code
	}{
		{h2frame.ErrCodeNo, codes.Internal},
		{h2frame.ErrCodeProtocol, codes.Internal},
		{h2frame.ErrCodeCancel, codes.Canceled},
		{h2frame.ErrCodeEnhanceYourCalm, codes.ResourceExhausted},
		{h2frame.ErrCodeInadequateSecurity, codes.PermissionDenied},
		{h2frame.ErrCodeFlowControl, codes.ResourceExhausted},
	}
	c, accept := scriptedServer(t)
	errc := make(chan error, 1)
	call := func() {
		go func() {
			_, err := c.EmptyCall(context.Background(), &testpb.Empty{}, grpc.WaitForReady(true))
			errc <- err
		}()
	}
	call()
	p := accept()
	id := uint32(1)
	for _, tc := range tests {
		h := p.WantHeaders(id)
		if h.Get(":path") != "/grpc.testing.TestService/EmptyCall" || h.Get("te") != "trailers" || h.Get("content-type") != "application/grpc" {
			t.Fatalf("request headers %s", h2test.FormatFields(h.Fields))
		}
		p.WriteRST(id, tc.code)
		if err := <-errc; status.Code(err) != tc.want {
			t.Errorf("RST %v: %v, want %v", tc.code, err, tc.want)
		}
		id += 2
		call()
	}
	// REFUSED_STREAM: the server did not process the stream, so the call
	// is retried transparently, a bounded number of times, then fails
	// with Unavailable.
	attempts := 0
	for {
		p.WantHeaders(id)
		p.WriteRST(id, h2frame.ErrCodeRefusedStream)
		attempts++
		id += 2
		select {
		case err := <-errc:
			if status.Code(err) != codes.Unavailable || attempts < 2 {
				t.Errorf("refused %d times: %v, want Unavailable after a retry", attempts, err)
			}
			return
		case <-time.After(200 * time.Millisecond):
			if attempts > 5 {
				t.Fatal("refused stream retried without bound")
			}
		}
	}
}

func TestWireClientSendsDeadlineAndCancels(t *testing.T) {
	c, accept := scriptedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { _, err := c.EmptyCall(ctx, &testpb.Empty{}, grpc.WaitForReady(true)); errc <- err }()
	p := accept()
	h := p.WantHeaders(1)
	to, err := time.ParseDuration(h.Get("grpc-timeout")[:len(h.Get("grpc-timeout"))-1] + "us")
	if err != nil || to <= time.Second || to > 2*time.Second {
		t.Errorf("grpc-timeout %q", h.Get("grpc-timeout"))
	}
	cancel()
	p.WantRST(1, h2frame.ErrCodeCancel)
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Errorf("after cancel: %v", err)
	}
}

// scriptedTo connects a scripted HTTP/2 client to the server at addr and
// greets it.
func scriptedTo(t *testing.T, addr string) *h2test.Peer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := h2test.NewPeer(t, c, h2test.ClientRole)
	p.Greet()
	return p
}
