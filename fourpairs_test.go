package leangrpc_test

import (
	"net"
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// allPairs adds grpc-go talking to itself to pairs: the reference that
// tests asking for "the same as grpc-go" compare the other three with.
var allPairs = append([]pair{{"grpc-grpc", false, false}}, pairs...)

// forAllPairs is forPairs over allPairs.
func forAllPairs(t *testing.T, f func(t *testing.T, p pair)) { forPairsIn(t, allPairs, f) }

// stackOptions are the options one test case gives each implementation.
type stackOptions struct {
	leanServer []leangrpc.ServerOption
	grpcServer []grpc.ServerOption
	leanDial   []leangrpc.DialOption
	grpcDial   []grpc.DialOption
}

// startTestService starts grpc-go's interop TestService on the server of
// p and returns a client of p's, both stopped at the end of the test. The
// client speaks plaintext unless o's dial options say otherwise.
func startTestService(t *testing.T, p pair, o stackOptions) testgrpc.TestServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	if p.leanServer {
		s := leangrpc.NewServer(o.leanServer...)
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		go func() { defer close(done); s.Serve(lis) }()
		t.Cleanup(func() { s.Stop(); <-done })
	} else {
		s := grpc.NewServer(o.grpcServer...)
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		go func() { defer close(done); s.Serve(lis) }()
		t.Cleanup(func() { s.Stop(); <-done })
	}
	var cc grpc.ClientConnInterface
	if p.leanClient {
		c, err := leangrpc.NewClient(lis.Addr().String(), append([]leangrpc.DialOption{leangrpc.WithTransportCredentials(insecure.NewCredentials())}, o.leanDial...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cc = c
	} else {
		c, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.grpcDial...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cc = c
	}
	return testgrpc.NewTestServiceClient(cc)
}
