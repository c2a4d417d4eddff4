package h2conn

import (
	"context"
	"runtime"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// A busy connection keeps up to maxFreeStreams released streams for
// reuse, so that 120 calls in flight do not allocate; once idle it keeps
// at most idleFreeStreams.
func TestStreamFreeListBusyAndIdle(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	ctx := context.Background()
	keeper, err := p.client.NewStream(ctx, reqFields("/keep"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	streams := make([]*Stream, n)
	for i := range streams {
		if streams[i], err = p.client.NewStream(ctx, reqFields("/x"), StreamOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range streams {
		finishStream(t, s)
		s.Release()
	}
	if got := freeStreamCount(p.client); got != n {
		t.Errorf("busy connection keeps %d released streams, want %d", got, n)
	}
	// Reuse: the next streams come from the free list.
	again, err := p.client.NewStream(ctx, reqFields("/y"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := freeStreamCount(p.client); got != n-1 {
		t.Errorf("after NewStream %d free streams, want %d", got, n-1)
	}
	finishStream(t, again)
	again.Release()
	finishStream(t, keeper)
	keeper.Release()
	if got := freeStreamCount(p.client); got > idleFreeStreams {
		t.Errorf("idle connection keeps %d released streams, want at most %d", got, idleFreeStreams)
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

func freeStreamCount(c *Conn) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.freeStreams)
}

// The streams an idle connection cuts from its free list go to the
// process-wide spare pool, and its next burst of streams takes them back
// instead of allocating.
func TestIdleTrimFeedsSpareStreams(t *testing.T) {
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	ctx := context.Background()
	const n = 40
	burst := func() []*Stream {
		streams := make([]*Stream, n)
		for i := range streams {
			var err error
			if streams[i], err = p.client.NewStream(ctx, reqFields("/x"), StreamOptions{}); err != nil {
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
