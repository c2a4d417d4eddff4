package h2conn

import (
	"context"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// The streams an idle connection cuts from its free list go to the
// process-wide spare pool, and its next burst of streams takes them back
// instead of allocating.
func TestIdleTrimFeedsSpareStreams(t *testing.T) {
	if !shareTimers {
		t.Skip("spare pool off")
	}
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	ctx := context.Background()
	const n = 40
	burst := func() []*Stream {
		streams := make([]*Stream, n)
		for i := range streams {
			var err error
			if streams[i], err = p.client.NewStream(ctx, reqFields("/x"), false); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range streams {
			finishStream(t, s)
			s.Release()
		}
		return streams
	}
	first := make(map[*Stream]bool)
	for _, s := range burst() {
		first[s] = true
	}
	if got := freeStreamCount(p.client); got > idleFreeStreams {
		t.Errorf("idle connection keeps %d released streams, want at most %d", got, idleFreeStreams)
	}
	reused := 0
	for _, s := range burst() {
		if first[s] {
			reused++
		}
	}
	// idleFreeStreams come from the free list; the race detector's
	// sync.Pool drops a quarter of what it is given.
	if reused <= idleFreeStreams {
		t.Errorf("second burst reused %d of %d streams, want more than the %d the free list kept", reused, n, idleFreeStreams)
	}
	p.close(t)
}
