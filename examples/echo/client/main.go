// Command client calls the echo server (examples/echo/server) through
// leangrpc with grpc-go's generated TestService stubs.
//
// Run it with
//
//	go run ./examples/echo/server &
//	go run ./examples/echo/client -msg "hello"
//
// The only line that differs from a grpc-go client is the constructor:
//
//	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))         // grpc-go
//	cc, err := leangrpc.NewClient(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials())) // leangrpc
//
// The generated client, call options, metadata and status are grpc-go's.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/leangrpc/leangrpc"
)

var (
	addr = flag.String("addr", "127.0.0.1:50051", "The server address")
	msg  = flag.String("msg", "hello from leangrpc", "The message to echo")
	who  = flag.String("who", "newcomer", "Sent as the \"who\" metadata")
)

func main() {
	flag.Parse()
	// With grpc-go: grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := leangrpc.NewClient(*addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatalf("NewClient: %v", err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "who", *who)
	var header metadata.MD
	resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{
		Payload: &testpb.Payload{Body: []byte(*msg)},
	}, grpc.Header(&header))
	if err != nil {
		log.Fatalf("UnaryCall failed: code %v: %v", status.Code(err), status.Convert(err).Message())
	}
	fmt.Printf("echo: %s\n", resp.GetPayload().GetBody())
	fmt.Printf("echoed-for: %v, method: %v\n", header.Get("echoed-for"), header.Get("method"))
}
