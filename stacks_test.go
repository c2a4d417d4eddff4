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
)

// stack names one implementation: leangrpc or grpc-go.
type stack struct {
	name string
	lean bool
}

var stacks = []stack{{"lean", true}, {"grpc", false}}

// stackServer is a server of either stack serving one service over
// loopback TCP.
type stackServer struct {
	addr string
	stop func() // Stop, then wait for Serve to return
}

// serveOn starts a server of the given stack serving desc (with impl as the
// service value) and stops it when the test ends.
func serveOn(t *testing.T, lean bool, desc *grpc.ServiceDesc, impl any) *stackServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var stop func()
	if lean {
		s := leangrpc.NewServer()
		s.RegisterService(desc, impl)
		go func() { defer close(done); s.Serve(lis) }()
		stop = s.Stop
	} else {
		s := grpc.NewServer()
		s.RegisterService(desc, impl)
		go func() { defer close(done); s.Serve(lis) }()
		stop = s.Stop
	}
	ss := &stackServer{addr: lis.Addr().String()}
	ss.stop = func() { stop(); <-done }
	t.Cleanup(ss.stop)
	return ss
}

// dialOn returns a client of the given stack connected to addr, closed
// when the test ends.
func dialOn(t *testing.T, lean bool, addr string) grpc.ClientConnInterface {
	t.Helper()
	return dialWith(t, lean, addr, nil, nil)
}

// dialWith is dialOn for any target, with plaintext credentials and the
// options of the stack's client: lo for leangrpc's, gos for grpc-go's.
func dialWith(t *testing.T, lean bool, target string, lo []leangrpc.DialOption, gos []grpc.DialOption) grpc.ClientConnInterface {
	t.Helper()
	if lean {
		cc, err := leangrpc.NewClient(target, append([]leangrpc.DialOption{leangrpc.WithTransportCredentials(insecure.NewCredentials())}, lo...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	cc, err := grpc.NewClient(target, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, gos...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// behaveService is the name of the service the behaviour tests register
// with their own handlers.
const behaveService = "behave.S"

// streamService describes behaveService with one method "Stream" (both
// directions streaming) served by h.
func streamService(h grpc.StreamHandler) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: behaveService,
		HandlerType: (*any)(nil),
		Streams:     []grpc.StreamDesc{{StreamName: "Stream", Handler: h, ServerStreams: true, ClientStreams: true}},
	}
}

var (
	streamMethod = "/" + behaveService + "/Stream"
	bidiDesc     = &grpc.StreamDesc{StreamName: "Stream", ServerStreams: true, ClientStreams: true}
)

// forStacks runs f for every client stack against every server stack
// (forAllPairs' four pairings), checking goroutines and pooled buffers
// afterwards.
func forStacks(t *testing.T, f func(t *testing.T, client, server stack)) {
	forAllPairs(t, func(t *testing.T, p pair) { f(t, stackOf(p.leanClient), stackOf(p.leanServer)) })
}

// stackOf returns leangrpc's stack or grpc-go's.
func stackOf(lean bool) stack {
	if lean {
		return stacks[0]
	}
	return stacks[1]
}

// baseline returns the goroutine count and the default pool's outstanding
// buffers to compare with after a test (process-wide goroutines started
// first).
func baseline() (goroutines int, buffers int64) {
	sockio.StartIdlePoller()
	return runtime.NumGoroutine(), bufpool.Default().Outstanding()
}
