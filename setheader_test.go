package leangrpc_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestSetHeaderWithoutMessage: headers a handler sets with SetHeader reach
// the client when the handler sends no message and ends the call, with an
// error or without, as with grpc-go (which sends them in a HEADERS frame
// ahead of the trailers); the trailers stay apart.
func TestSetHeaderWithoutMessage(t *testing.T) {
	desc := &grpc.ServiceDesc{
		ServiceName: behaveService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(testpb.Empty)); err != nil {
				return nil, err
			}
			if err := grpc.SetHeader(ctx, metadata.Pairs("h", "unary")); err != nil {
				return nil, err
			}
			grpc.SetTrailer(ctx, metadata.Pairs("t", "unary"))
			return nil, status.Error(codes.NotFound, "no message")
		}}},
		Streams: streamService(func(_ any, stream grpc.ServerStream) error {
			if err := stream.SetHeader(metadata.Pairs("h", "stream")); err != nil {
				return err
			}
			stream.SetTrailer(metadata.Pairs("t", "stream"))
			return nil
		}).Streams,
	}
	forStacks(t, func(t *testing.T, client, server stack) {
		srv := serveOn(t, server.lean, desc, struct{}{})
		cc := dialOn(t, client.lean, srv.addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		var hdr, tr metadata.MD
		err := cc.Invoke(ctx, "/"+behaveService+"/Unary", &testpb.Empty{}, new(testpb.Empty), grpc.Header(&hdr), grpc.Trailer(&tr))
		if status.Code(err) != codes.NotFound {
			t.Errorf("Invoke = %v, want NotFound", err)
		}
		checkMD(t, "unary header", hdr, "h", "unary", "t")
		checkMD(t, "unary trailer", tr, "t", "unary", "h")

		cs, err := cc.NewStream(ctx, bidiDesc, streamMethod)
		if err != nil {
			t.Fatal(err)
		}
		cs.CloseSend()
		hdr, err = cs.Header()
		if err != nil {
			t.Errorf("Header() = %v", err)
		}
		checkMD(t, "stream header", hdr, "h", "stream", "t")
		if err := cs.RecvMsg(new(testpb.Empty)); err != io.EOF {
			t.Errorf("RecvMsg = %v, want io.EOF", err)
		}
		checkMD(t, "stream trailer", cs.Trailer(), "t", "stream", "h")
	})
}

// checkMD checks that md holds key: value and nothing under absent.
func checkMD(t *testing.T, what string, md metadata.MD, key, value, absent string) {
	t.Helper()
	if got := md.Get(key); len(got) != 1 || got[0] != value {
		t.Errorf("%s = %v, want %s: %s", what, md, key, value)
	}
	if got := md.Get(absent); len(got) != 0 {
		t.Errorf("%s = %v, want no %s", what, md, absent)
	}
}
