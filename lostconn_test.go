package leangrpc_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// TestLostConnectionIsNotEOF: when the server stops under an open stream,
// the client's RecvMsg fails with Unavailable, and the error does not match
// io.EOF under errors.Is (grpc-go's does not either): code that takes
// io.EOF for the clean end of a stream must not take a dead server for a
// finished call.
func TestLostConnectionIsNotEOF(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		started := make(chan struct{})
		srv := serveOn(t, server.lean, streamService(func(_ any, stream grpc.ServerStream) error {
			if err := stream.RecvMsg(new(testpb.Empty)); err != nil {
				return err
			}
			close(started)
			<-stream.Context().Done()
			return nil
		}), struct{}{})
		cc := dialOn(t, client.lean, srv.addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs, err := cc.NewStream(ctx, bidiDesc, streamMethod)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(&testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the handler did not start")
		}
		srv.stop()
		err = cs.RecvMsg(new(testpb.Empty))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("RecvMsg after the server stopped = %v, want code Unavailable", err)
		}
		if errors.Is(err, io.EOF) {
			t.Errorf("RecvMsg after the server stopped = %v, which matches io.EOF", err)
		}
		// Later calls of the stream report the same.
		if err := cs.RecvMsg(new(testpb.Empty)); errors.Is(err, io.EOF) {
			t.Errorf("second RecvMsg = %v, which matches io.EOF", err)
		}
	})
}
