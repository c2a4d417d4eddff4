package leangrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leangrpc/leangrpc"
)

// checkHealth is user code: it needs only a grpc.ClientConnInterface, which
// both grpc-go's *grpc.ClientConn and leangrpc's *ClientConn are, so it runs
// unchanged on either.
func checkHealth(cc grpc.ClientConnInterface) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return "", err
	}
	return resp.GetStatus().String(), nil
}

// registerServices is user code too: it needs only a
// grpc.ServiceRegistrar, which both servers are.
func registerServices(s grpc.ServiceRegistrar) {
	healthpb.RegisterHealthServer(s, health.NewServer())
}

// A leangrpc server runs services written for grpc-go (here grpc-go's own
// health service) and answers grpc-go clients.
func ExampleNewServer() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := leangrpc.NewServer() // was grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()

	// A grpc-go client, unchanged.
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	fmt.Println(checkHealth(cc))
	// Output: SERVING <nil>
}

// A leangrpc client calls any gRPC server (here a grpc-go one) through
// the stubs protoc-gen-go-grpc generates.
func ExampleNewClient() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()

	// was grpc.NewClient(target, grpc.WithTransportCredentials(...))
	cc, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	fmt.Println(checkHealth(cc))
	// Output: SERVING <nil>
}

// Switching from grpc-go changes one constructor on each side. Code that
// registers services takes a grpc.ServiceRegistrar and code that makes
// calls takes a grpc.ClientConnInterface (not a *grpc.ClientConn), so it
// runs on both stacks; grpc-go's option names are leangrpc's too.
func Example_switchFromGrpcGo() {
	// Before: grpc-go on both sides.
	grpcServer := grpc.NewServer()
	registerServices(grpcServer)
	grpcClient := func(target string) (grpc.ClientConnInterface, func() error, error) {
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		return cc, cc.Close, nil
	}

	// After: leangrpc on both sides; only the constructors differ.
	leanServer := leangrpc.NewServer()
	registerServices(leanServer)
	leanClient := func(target string) (grpc.ClientConnInterface, func() error, error) {
		cc, err := leangrpc.NewClient(target, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		return cc, cc.Close, nil
	}

	for _, stack := range []struct {
		name   string
		serve  func(net.Listener) error
		stop   func()
		client func(string) (grpc.ClientConnInterface, func() error, error)
	}{
		{"grpc-go", grpcServer.Serve, grpcServer.Stop, grpcClient},
		{"leangrpc", leanServer.Serve, leanServer.Stop, leanClient},
	} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		go stack.serve(lis)
		cc, closeCC, err := stack.client(lis.Addr().String())
		if err != nil {
			log.Fatal(err)
		}
		st, err := checkHealth(cc)
		fmt.Println(stack.name, st, err)
		closeCC()
		stack.stop()
	}
	// Output:
	// grpc-go SERVING <nil>
	// leangrpc SERVING <nil>
}
