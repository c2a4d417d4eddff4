package leangrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// TestReviewZeroTimeout: a request whose grpc-timeout is already over (0n)
// is answered at once with a Trailers-Only DEADLINE_EXCEEDED, as grpc-go's
// server does, without running the handler; a request still being sent is
// then reset with NO_ERROR. It used to run the handler with a live context
// about 1 run in 20: run with -count=40.
func TestReviewZeroTimeout(t *testing.T) {
	for _, ended := range []bool{true, false} {
		ran := make(chan error, 1)
		_, addr := reviewServer(t, func(ctx context.Context) { ran <- ctx.Err() })
		p := scriptedTo(t, addr)
		p.WriteHeaders(1, false, request("/grpc.testing.TestService/EmptyCall", "grpc-timeout", "0n")...)
		if ended {
			p.WriteData(1, true, grpcFrame(0, nil))
		}
		h := p.WantHeaders(1)
		if !h.EndStream || h.Get(":status") != "200" || h.Get("grpc-status") != "4" {
			t.Errorf("request ended %v: answered with end %v :status %q grpc-status %q (%q), want a Trailers-Only DEADLINE_EXCEEDED",
				ended, h.EndStream, h.Get(":status"), h.Get("grpc-status"), h.Get("grpc-message"))
		}
		if !ended {
			p.WantRST(1, h2frame.ErrCodeNo)
		}
		select {
		case err := <-ran:
			t.Errorf("request ended %v: the handler ran (context error %v)", ended, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
