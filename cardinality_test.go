package leangrpc_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// The cardinality of a call's messages: a method that takes one request
// must get exactly one, and one that gives one response must give exactly
// one. A violation is an error with code Unimplemented, as gRPC's status
// code document and Connect's conformance suite have it; grpc-go says
// Internal. The messages are grpc-go's.

const cardinalityService = "behave.Cardinality"

// cardinalityDesc serves a unary method "Unary" and a server-streaming
// method "ServerStream", written as generated code writes them, and
// "Answers", a handler that takes one request and sends as many responses
// as the request's ResponseSize says (0 or 2 break the rule for the
// client's view of it as unary or client-streaming).
func cardinalityDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: cardinalityService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Unary",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var req testpb.SimpleRequest
				if err := dec(&req); err != nil {
					return nil, err
				}
				return &testpb.SimpleResponse{}, nil
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "ServerStream",
			ServerStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				var req testpb.SimpleRequest
				if err := stream.RecvMsg(&req); err != nil {
					return err
				}
				return stream.SendMsg(&testpb.SimpleResponse{})
			},
		}, {
			StreamName:    "Answers",
			ServerStreams: true,
			ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				var req testpb.SimpleRequest
				if err := stream.RecvMsg(&req); err != nil {
					return err
				}
				for range req.ResponseSize {
					if err := stream.SendMsg(&testpb.SimpleResponse{}); err != nil {
						return err
					}
				}
				return nil
			},
		}},
	}
}

// TestCardinalityRequests: a client that sends a method taking one
// request none or two (it describes the method as client-streaming) gets
// Unimplemented from a leangrpc server, whichever client it is.
func TestCardinalityRequests(t *testing.T) {
	for _, client := range stacks {
		t.Run(client.name+"-client", func(t *testing.T) {
			srv := serveOn(t, true, cardinalityDesc(), struct{}{})
			cc := dialOn(t, client.lean, srv.addr)
			for _, method := range []string{"Unary", "ServerStream"} {
				for _, n := range []int{0, 2} {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
					cs, err := cc.NewStream(ctx, desc, "/"+cardinalityService+"/"+method)
					if err != nil {
						t.Fatal(err)
					}
					for range n {
						if err := cs.SendMsg(&testpb.SimpleRequest{}); err != nil {
							t.Fatal(err)
						}
					}
					cs.CloseSend()
					for err == nil {
						err = cs.RecvMsg(&testpb.SimpleResponse{})
					}
					if status.Code(err) != codes.Unimplemented {
						t.Errorf("%s with %d requests: %v, want code Unimplemented", method, n, err)
					}
				}
			}
		})
	}
}

// TestCardinalityResponses: a leangrpc client calling a method as unary or
// client-streaming fails with Unimplemented when the server answers OK
// with no response or with two, whichever server it is; with one it
// succeeds.
func TestCardinalityResponses(t *testing.T) {
	for _, server := range stacks {
		t.Run(server.name+"-server", func(t *testing.T) {
			srv := serveOn(t, server.lean, cardinalityDesc(), struct{}{})
			cc := dialOn(t, true, srv.addr)
			method := "/" + cardinalityService + "/Answers"
			for _, n := range []int32{0, 1, 2} {
				want := codes.Unimplemented
				if n == 1 {
					want = codes.OK
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err := cc.Invoke(ctx, method, &testpb.SimpleRequest{ResponseSize: n}, &testpb.SimpleResponse{})
				if status.Code(err) != want {
					t.Errorf("unary, %d responses: %v, want code %v", n, err, want)
				}
				cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, method)
				if err != nil {
					t.Fatal(err)
				}
				if err := cs.SendMsg(&testpb.SimpleRequest{ResponseSize: n}); err != nil {
					t.Fatal(err)
				}
				cs.CloseSend()
				err = cs.RecvMsg(&testpb.SimpleResponse{})
				if status.Code(err) != want {
					t.Errorf("client-streaming, %d responses: %v, want code %v", n, err, want)
				}
				if err == nil {
					if err := cs.RecvMsg(&testpb.SimpleResponse{}); err != io.EOF {
						t.Errorf("client-streaming, %d responses: a second RecvMsg gave %v, want io.EOF", n, err)
					}
				}
			}
		})
	}
}
