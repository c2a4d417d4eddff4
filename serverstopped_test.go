package leangrpc_test

import (
	"errors"
	"net"
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
)

// TestServeAfterStopIsGRPCsError runs Serve after Stop and after
// GracefulStop on both servers: each returns grpc-go's ErrServerStopped,
// so code converted from grpc-go that compares with it keeps working.
func TestServeAfterStopIsGRPCsError(t *testing.T) {
	if leangrpc.ErrServerStopped != grpc.ErrServerStopped {
		t.Fatalf("leangrpc.ErrServerStopped is %v, not grpc-go's value", leangrpc.ErrServerStopped)
	}
	type server interface {
		Serve(net.Listener) error
		Stop()
		GracefulStop()
	}
	servers := map[string]func() server{
		"leangrpc": func() server { return leangrpc.NewServer() },
		"grpc-go":  func() server { return grpc.NewServer() },
	}
	for name, newServer := range servers {
		for _, graceful := range []bool{false, true} {
			s := newServer()
			if graceful {
				s.GracefulStop()
			} else {
				s.Stop()
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			err = s.Serve(lis)
			if !errors.Is(err, grpc.ErrServerStopped) || !errors.Is(err, leangrpc.ErrServerStopped) {
				t.Errorf("%s (graceful %v): Serve after stop returned %v, want grpc.ErrServerStopped", name, graceful, err)
			}
			// Serve closed the listener, as grpc-go's does.
			if _, err := lis.Accept(); err == nil {
				t.Errorf("%s: the listener is still open", name)
			}
		}
	}
}
