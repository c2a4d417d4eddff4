package leangrpc_test

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc/keepalive"
)

// TestReviewServerKeepaliveSharedTimers: the server's keepalive timers live
// in the process-wide sharedTimer heap. With many connections at once,
// each silent client must get its PING after Time and lose its connection
// after Timeout (not later, not never), while the clients that answer keep
// theirs over several rounds (their timers re-armed among the others being
// removed).
func TestReviewServerKeepaliveSharedTimers(t *testing.T) {
	sockio.StartIdlePoller()
	const every, timeout = 100 * time.Millisecond, 100 * time.Millisecond
	_, addr := serve(t, leangrpc.KeepaliveParamsUnfloored(keepalive.ServerParameters{Time: every, Timeout: timeout}))
	const conns = 16
	type result struct {
		answering bool
		firstPing time.Duration
		pings     int
		closedAt  time.Duration // 0: still open at the end
		err       error
	}
	results := make([]result, conns)
	var wg sync.WaitGroup
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p := h2test.NewPeer(t, c, h2test.ClientRole)
		p.Greet()
		start := time.Now()
		answering := i%2 == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.answering = answering
			end := start.Add(900 * time.Millisecond)
			for time.Now().Before(end) {
				f, err := p.ReadFrame(time.Until(end))
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						r.closedAt = time.Since(start)
					}
					return
				}
				if f.Type == h2frame.TypePing && !f.IsAck() {
					if r.pings == 0 {
						r.firstPing = time.Since(start)
					}
					r.pings++
					if answering {
						p.WritePingAck(f.PingData())
					}
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range results {
		switch {
		case r.answering:
			if r.closedAt != 0 || r.pings < 3 {
				t.Errorf("conn %d (answers pings): closed at %v after %d pings; want open with a ping every %v", i, r.closedAt, r.pings, every)
			}
		default:
			if r.pings == 0 || r.firstPing < every-20*time.Millisecond {
				t.Errorf("conn %d (silent): first ping at %v (%d pings), want one after %v", i, r.firstPing, r.pings, every)
			}
			if r.closedAt == 0 || r.closedAt < every+timeout-20*time.Millisecond {
				t.Errorf("conn %d (silent): closed at %v, want about %v", i, r.closedAt, every+timeout)
			}
		}
	}
}
