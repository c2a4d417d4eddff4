// Command server is a gRPC server written against grpc-go's API and served
// by leangrpc. It implements UnaryCall of grpc.testing.TestService, whose
// generated stubs (protoc-gen-go-grpc output) ship with grpc-go, by echoing
// the request payload back.
//
// Run it with
//
//	go run ./examples/echo/server &
//	go run ./examples/echo/client
//
// The only line that differs from a grpc-go server is the constructor:
//
//	s := grpc.NewServer()     // grpc-go
//	s := leangrpc.NewServer() // leangrpc
//
// Everything else (the generated Register function, the handler, status,
// codes and metadata) is grpc-go's.
package main

import (
	"context"
	"flag"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/leangrpc/leangrpc"
)

var addr = flag.String("addr", "127.0.0.1:50051", "The address to listen on")

// echoServer implements TestService.UnaryCall; the other methods answer
// Unimplemented through the embedded generated type.
type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
}

// UnaryCall returns the request's payload, and reports the method and the
// caller's "who" metadata in a response header.
func (echoServer) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if len(req.GetPayload().GetBody()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "empty payload: nothing to echo")
	}
	who := "anonymous"
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("who")) > 0 {
		who = md.Get("who")[0]
	}
	method, _ := grpc.Method(ctx)
	if err := grpc.SetHeader(ctx, metadata.Pairs("echoed-for", who, "method", method)); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func main() {
	flag.Parse()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	s := leangrpc.NewServer() // with grpc-go: grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, echoServer{})
	log.Printf("echo server listening on %v", lis.Addr())
	if err := s.Serve(lis); err != nil {
		log.Fatalf("Serve: %v", err)
	}
}
