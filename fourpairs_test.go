package leangrpc_test

import (
	"net"
	"runtime"
	"testing"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// allPairs adds grpc-go talking to itself to pairs: the reference that
// tests asking for "the same as grpc-go" compare the other three with.
var allPairs = append([]pair{{"grpc-grpc", false, false}}, pairs...)

// forAllPairs is forPairs over allPairs: f runs once per pairing, and
// goroutines and pool buffers must return to their baseline afterwards.
func forAllPairs(t *testing.T, f func(t *testing.T, p pair)) {
	sockio.StartIdlePoller() // process-wide, started before the baseline
	for _, p := range allPairs {
		t.Run(p.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			bufs := bufpool.Default().Outstanding()
			t.Run("body", func(t *testing.T) { f(t, p) })
			checkGoroutines(t, base)
			checkBuffers(t, bufs)
		})
	}
}

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
