package leangrpc_test

import (
	"context"
	"net"
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/testdata"
)

// TestTLS runs calls over grpc-go's TLS credentials in the three pairings:
// transport credentials plug in through the same options as plaintext.
func TestTLS(t *testing.T) {
	serverCreds, err := credentials.NewServerTLSFromFile(testdata.Path("x509/server1_cert.pem"), testdata.Path("x509/server1_key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	clientCreds, err := credentials.NewClientTLSFromFile(testdata.Path("x509/server_ca_cert.pem"), "x.test.example.com")
	if err != nil {
		t.Fatal(err)
	}
	authSeen := make(chan credentials.AuthInfo, 1)
	recordAuth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p, _ := peer.FromContext(ctx)
		authSeen <- p.AuthInfo
		return h(ctx, req)
	}
	forPairs(t, func(t *testing.T, p pair) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if p.leanServer {
			s := leangrpc.NewServer(leangrpc.Creds(serverCreds), leangrpc.UnaryInterceptor(recordAuth))
			testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
			go s.Serve(lis)
			defer s.Stop()
		} else {
			s := grpc.NewServer(grpc.Creds(serverCreds), grpc.UnaryInterceptor(recordAuth))
			testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
			go s.Serve(lis)
			defer s.Stop()
		}
		var cc grpc.ClientConnInterface
		if p.leanClient {
			c, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithTransportCredentials(clientCreds))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cc = c
		} else {
			c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(clientCreds))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cc = c
		}
		var pr peer.Peer
		tc := testgrpc.NewTestServiceClient(cc)
		if _, err := tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 100, Payload: payload(100)}, grpc.Peer(&pr)); err != nil {
			t.Fatalf("UnaryCall over TLS: %v", err)
		}
		if ai := <-authSeen; ai == nil || ai.AuthType() != "tls" {
			t.Errorf("server saw AuthInfo %v, want tls", ai)
		}
		if pr.AuthInfo == nil || pr.AuthInfo.AuthType() != "tls" {
			t.Errorf("client peer AuthInfo %v, want tls", pr.AuthInfo)
		}
	})
}
