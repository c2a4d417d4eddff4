package leangrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2test"
)

// TestReviewHugeTimeout: the largest grpc-timeout values (capped at the
// longest time.Duration by DecodeTimeout) give the handler a deadline in
// the future, and the call succeeds: a deadline computed with an overflow
// would end it at once.
func TestReviewHugeTimeout(t *testing.T) {
	for _, v := range []string{"99999999H", "99999999S", "99999999n"} {
		type seen struct {
			dl    time.Time
			ok    bool
			err   error
			after time.Duration
		}
		got := make(chan seen, 1)
		_, addr := reviewServer(t, func(ctx context.Context) {
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
