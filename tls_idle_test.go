package leangrpc_test

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// TestIdleTLSConnectionsHoldNothing is TestIdleConnectionsHoldNothing over
// TLS (grpc-go's credentials on both sides): on the Linux fast path an idle
// TLS connection waits for its socket under TLS in the idle poller, with
// no goroutine and no pooled buffer on either side; on the portable path
// each side keeps its reader parked in Read, holding a pooled buffer. Idle
// connections still carry calls, large ones included (records split across
// reads), and everything comes back at Close.
func TestIdleTLSConnectionsHoldNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("opens many TLS connections")
	}
	const n = 50
	setup := serverTLSSetup(t)
	poller := sockio.StartIdlePoller() == nil
	base := runtime.NumGoroutine()
	bufs := bufpool.Default().Outstanding()

	s := leangrpc.NewServer(leangrpc.Creds(setup.server))
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { s.Serve(ln); close(served) }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conns := make([]*leangrpc.ClientConn, 0, n)
	for range n {
		cc, err := leangrpc.NewClient(ln.Addr().String(), leangrpc.WithTransportCredentials(setup.client))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cc)
		if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall on connection %d: %v", len(conns), err)
		}
	}

	perConn, bufsPerConn := 2, 2
	if poller {
		perConn, bufsPerConn = 0, 0
	}
	const slack = 8
	wantAtMost := base + n*perConn + slack
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > wantAtMost || bufpool.Default().Outstanding() > bufs+int64(n*bufsPerConn) {
		if time.Now().After(deadline) {
			t.Fatalf("after going idle: %d goroutines (baseline %d, want at most %d for %d TLS connections); %d pooled buffers out (baseline %d)",
				runtime.NumGoroutine(), base, wantAtMost, n, bufpool.Default().Outstanding(), bufs)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Idle connections still work, with messages of many records.
	for _, cc := range []*leangrpc.ClientConn{conns[0], conns[n/2]} {
		tc := testgrpc.NewTestServiceClient(cc)
		if _, err := tc.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall after idling: %v", err)
		}
		req := &testpb.SimpleRequest{ResponseSize: 300 << 10, Payload: &testpb.Payload{Body: make([]byte, 200<<10)}}
		resp, err := tc.UnaryCall(ctx, req)
		if err != nil {
			t.Fatalf("large UnaryCall after idling: %v", err)
		}
		if got := len(resp.GetPayload().GetBody()); got != 300<<10 {
			t.Fatalf("response of %d bytes, want %d", got, 300<<10)
		}
	}
	for _, cc := range conns {
		cc.Close()
	}
	s.Stop()
	<-served
	checkGoroutines(t, base)
	checkBuffers(t, bufs)
}

// wrappingTLS is TLS credentials that return the handshake's conn inside a
// type of their own, as credentials that count or log bytes do: the
// connection takes the portable path, reading through the conn the
// handshake was given as through the raw socket.
type wrappingTLS struct {
	credentials.TransportCredentials
}

type wrappedConn struct{ net.Conn }

func (w wrappingTLS) Clone() credentials.TransportCredentials {
	return wrappingTLS{w.TransportCredentials.Clone()}
}

func (w wrappingTLS) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, a, err := w.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, err
	}
	return wrappedConn{c}, a, nil
}

func (w wrappingTLS) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, a, err := w.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	return wrappedConn{c}, a, nil
}

// TestTLSCredentialsOwnConn: TLS credentials whose handshake returns a conn
// of their own (not the *tls.Conn) carry calls, large ones included.
func TestTLSCredentialsOwnConn(t *testing.T) {
	setup := serverTLSSetup(t)
	s := leangrpc.NewServer(leangrpc.Creds(wrappingTLS{setup.server}))
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { s.Serve(ln); close(served) }()
	defer func() { s.Stop(); <-served }()
	cc, err := leangrpc.NewClient(ln.Addr().String(), leangrpc.WithTransportCredentials(wrappingTLS{setup.client}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := testgrpc.NewTestServiceClient(cc)
	for range 3 {
		req := &testpb.SimpleRequest{ResponseSize: 100 << 10, Payload: &testpb.Payload{Body: make([]byte, 70<<10)}}
		resp, err := tc.UnaryCall(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(resp.GetPayload().GetBody()); got != 100<<10 {
			t.Fatalf("response of %d bytes, want %d", got, 100<<10)
		}
		time.Sleep(5 * time.Millisecond) // let the connections go idle between calls
	}
}
