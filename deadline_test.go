package leangrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// TestHugeTimeout: the largest grpc-timeout values (capped at the
// longest time.Duration by DecodeTimeout) give the handler a deadline in
// the future, and the call succeeds: a deadline computed with an overflow
// would end it at once.
func TestHugeTimeout(t *testing.T) {
	for _, v := range []string{"99999999H", "99999999S", "99999999n"} {
		type seen struct {
			dl    time.Time
			ok    bool
			err   error
			after time.Duration
		}
		got := make(chan seen, 1)
		_, addr := watchedServer(t, func(ctx context.Context) {
			dl, ok := ctx.Deadline()
			time.Sleep(time.Millisecond)
			got <- seen{dl, ok, ctx.Err(), time.Until(dl)}
		})
		p := scriptedTo(t, addr)
		p.WriteHeaders(1, false, request("/grpc.testing.TestService/EmptyCall", "grpc-timeout", v)...)
		p.WriteData(1, true, grpcFrame(0, nil))
		s := <-got
		if !s.ok || s.err != nil || (v != "99999999n" && s.after < time.Hour) {
			t.Errorf("grpc-timeout %s: Deadline %v (%v from now), %v; Err %v", v, s.dl, s.after, s.ok, s.err)
		}
		h := p.WantHeaders(1)
		if h.EndStream {
			t.Errorf("grpc-timeout %s: Trailers-Only answer %s", v, h2test.FormatFields(h.Fields))
			continue
		}
		if _, tr := p.WantBodyTrailers(1, true); tr.Get("grpc-status") != "0" {
			t.Errorf("grpc-timeout %s: status %s", v, h2test.FormatFields(tr.Fields))
		}
	}
}

// TestZeroTimeout: a request whose grpc-timeout is already over (0n)
// is answered at once with a Trailers-Only DEADLINE_EXCEEDED, as grpc-go's
// server does, without running the handler; a request still being sent is
// then reset with NO_ERROR. It used to run the handler with a live context
// about 1 run in 20: run with -count=40.
func TestZeroTimeout(t *testing.T) {
	for _, ended := range []bool{true, false} {
		ran := make(chan error, 1)
		_, addr := watchedServer(t, func(ctx context.Context) { ran <- ctx.Err() })
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
