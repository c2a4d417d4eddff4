package leangrpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// A lone unary call runs its handler on the connection's reader, and a
// lone client reads its own response (internal/h2conn's reader.go). Neither
// may stall the connection: while one handler blocks, another call on the
// same connection completes (the watcher gives the server's read role to a
// new reader), and a call whose handler blocks ends when its context does
// (the client's own read is bounded).
func TestLoneCallBlockingHandler(t *testing.T) {
	forPairs(t, func(t *testing.T, p pair) {
		started := make(chan struct{}, 2)
		release := make(chan struct{})
		block := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if r, ok := req.(*testpb.SimpleRequest); ok && r.ResponseSize >= 7 && r.ResponseSize <= 8 {
				started <- struct{}{}
				if r.ResponseSize == 8 {
					<-ctx.Done() // until the client cancels
					return nil, ctx.Err()
				}
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return h(ctx, req)
		}
		e := setup(t, p, serverSettings{unary: []grpc.UnaryServerInterceptor{block}}, clientSettings{})
		if _, err := e.tc.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		blocked := make(chan error, 1)
		go func() {
			_, err := e.tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 7})
			blocked <- err
		}()
		<-started
		for i := range 3 {
			if _, err := e.tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
				t.Fatalf("call %d while a handler blocks: %v", i, err)
			}
		}
		close(release)
		if err := <-blocked; err != nil {
			t.Fatalf("the blocked call: %v", err)
		}

		// Alone on the connection, a call whose handler blocks ends with
		// its context.
		ctx, cancel := context.WithCancel(ctxT(t))
		ended := make(chan error, 1)
		go func() {
			_, err := e.tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 8})
			ended <- err
		}()
		<-started
		time.Sleep(5 * time.Millisecond) // the caller waits in its read
		cancel()
		select {
		case err := <-ended:
			if status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) {
				t.Errorf("canceled call: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a canceled call waiting for its response did not end")
		}
		if _, err := e.tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
			t.Fatalf("call after the canceled one: %v", err)
		}
		e.stop()
	})
}
