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

// TestSendMsgAfterCloseSend: SendMsg after CloseSend fails with Internal
// "SendMsg called after CloseSend" and ends the call, so RecvMsg reports
// the same error, as grpc-go's client does; on a call that is not
// client-streaming, CloseSend before the request has the same effect.
func TestSendMsgAfterCloseSend(t *testing.T) {
	const want = "SendMsg called after CloseSend"
	forStacks(t, func(t *testing.T, client, server stack) {
		srv := serveOn(t, server.lean, streamService(func(_ any, stream grpc.ServerStream) error {
			// Receive to the end, then outlive the call: only the client
			// ends it.
			for stream.RecvMsg(new(testpb.Empty)) == nil {
			}
			<-stream.Context().Done()
			return nil
		}), struct{}{})
		cc := dialOn(t, client.lean, srv.addr)
		for _, desc := range []*grpc.StreamDesc{bidiDesc, {StreamName: "Stream", ServerStreams: true}} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			cs, err := cc.NewStream(ctx, desc, streamMethod)
			if err != nil {
				t.Fatal(err)
			}
			if desc.ClientStreams {
				if err := cs.SendMsg(&testpb.Empty{}); err != nil {
					t.Fatalf("first SendMsg: %v", err)
				}
			}
			if err := cs.CloseSend(); err != nil {
				t.Fatalf("CloseSend: %v", err)
			}
			err = cs.SendMsg(&testpb.Empty{})
			if status.Code(err) != codes.Internal || status.Convert(err).Message() != want {
				t.Errorf("client streams %v: SendMsg after CloseSend = %v, want Internal %q", desc.ClientStreams, err, want)
			}
			err = cs.RecvMsg(new(testpb.Empty))
			if status.Code(err) != codes.Internal || status.Convert(err).Message() != want {
				t.Errorf("client streams %v: RecvMsg after it = %v, want Internal %q", desc.ClientStreams, err, want)
			}
			cancel()
		}
	})
}

// TestInvokeNilRequest: Invoke with a nil request (an untyped nil, or a
// typed nil message) sends an empty message, as grpc-go does; the server
// receives it as the zero message.
func TestInvokeNilRequest(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		desc := &grpc.ServiceDesc{
			ServiceName: behaveService,
			HandlerType: (*any)(nil),
			Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				req := new(testpb.SimpleRequest)
				if err := dec(req); err != nil {
					return nil, err
				}
				if req.GetResponseSize() != 0 || req.GetPayload() != nil {
					return nil, status.Errorf(codes.InvalidArgument, "request %v is not empty", req)
				}
				return &testpb.SimpleResponse{Username: "empty"}, nil
			}}},
		}
		srv := serveOn(t, server.lean, desc, struct{}{})
		cc := dialOn(t, client.lean, srv.addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for name, req := range map[string]any{"nil": nil, "typed nil": (*testpb.SimpleRequest)(nil)} {
			reply := new(testpb.SimpleResponse)
			if err := cc.Invoke(ctx, "/"+behaveService+"/Unary", req, reply); err != nil || reply.GetUsername() != "empty" {
				t.Errorf("Invoke(%s) = %v, reply %v; want nil, the empty request's reply", name, err, reply)
			}
		}
		// A server stream's SendMsg(nil) is an empty message too.
		srv2 := serveOn(t, server.lean, streamService(func(_ any, stream grpc.ServerStream) error {
			return stream.SendMsg(nil)
		}), struct{}{})
		cs, err := dialOn(t, client.lean, srv2.addr).NewStream(ctx, bidiDesc, streamMethod)
		if err != nil {
			t.Fatal(err)
		}
		cs.CloseSend()
		reply := &testpb.SimpleResponse{Username: "x"}
		if err := cs.RecvMsg(reply); err != nil || reply.GetUsername() != "" {
			t.Errorf("RecvMsg of the server's SendMsg(nil) = %v, %v; want the empty message", reply, err)
		}
		if err := cs.RecvMsg(reply); err != io.EOF {
			t.Errorf("RecvMsg at the end = %v, want io.EOF", err)
		}
	})
}
