package grpcwire

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lateResetCtx is a context canceled by closing done whose AfterFunc never
// runs its function: the context watcher's reset comes too late to matter,
// as when its goroutine is not scheduled before the server answers.
type lateResetCtx struct{ done chan struct{} }

func (c *lateResetCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *lateResetCtx) Done() <-chan struct{}       { return c.done }
func (c *lateResetCtx) Value(any) any               { return nil }
func (c *lateResetCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}
func (c *lateResetCtx) AfterFunc(func()) func() bool { return func() bool { return true } }

// A call canceled before its half-close ends Canceled even when the
// context watcher's reset has not run: the half-close and the receive look
// at the context themselves. Without that, the half-close goes out, the
// server answers OK, and the receive returns the answer (grpc-go's interop
// case cancel_after_begin failed that way once in CI).
func TestCancelBeforeCloseSendWithoutReset(t *testing.T) {
	pool := bufpool.New(nil)
	cn, sn := h2test.TCPPair(t)
	cfg := h2conn.Config{Pool: pool}
	server := h2conn.NewServerConn(sn, cfg, grpcHandler(pool, func(ss *ServerStream) {
		for {
			if err := ss.SkipMsg(); err != nil {
				if err == io.EOF {
					ss.Finish(status.New(codes.OK, ""))
				}
				return
			}
		}
	}))
	ended := make(chan struct{})
	go server.ServeAsync(func() { close(ended) })
	client, err := h2conn.NewClientConn(cn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		ctx := &lateResetCtx{done: make(chan struct{})}
		cs, err := NewClientStream(ctx, client, &Request{Method: "/grpc.testing.TestService/StreamingInputCall"}, ClientConfig{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		close(ctx.done)
		cs.CloseSend()
		_, err = cs.Recv()
		if status.Code(err) != codes.Canceled {
			t.Fatalf("call %d: Recv after cancel and CloseSend: %v, want Canceled", i, err)
		}
		cs.Release()
	}
	client.Close()
	<-ended
}

// grpcHandler is an h2conn handler that takes each stream's request as
// gRPC (a malformed one is reset) and runs serve on a goroutine of its
// own, releasing the stream after.
func grpcHandler(pool *bufpool.Pool, serve func(ss *ServerStream)) h2conn.Handler {
	return h2conn.HandlerFunc(func(st *h2conn.Stream) {
		req, rej := ParseRequest(st.Headers())
		if rej != nil {
			st.Reset(0x8)
			st.Release()
			return
		}
		ss := NewServerStream(context.Background(), st, req, &ServerConfig{Pool: pool})
		go func() {
			defer st.Release()
			serve(ss)
		}()
	})
}
