package leangrpc_test

import (
	"context"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// TestReviewDerivedContextsStress: concurrent calls whose handlers derive
// many contexts from the handler's (WithCancel, WithTimeout, AfterFunc,
// some canceled or stopped early) while clients cancel at random moments:
// every derived context still registered ends once the call ends, every
// AfterFunc not stopped runs exactly once, a stopped one never, and no
// goroutine is left (race detector clean).
func TestReviewDerivedContextsStress(t *testing.T) {
	sockio.StartIdlePoller()
	var pending sync.WaitGroup
	var bad atomic.Int32
	var ranTwice atomic.Int32
	watch := func(ctx context.Context) {
		rng := rand.New(rand.NewSource(time.Now().UnixNano()))
		var kids []context.Context
		var cancels []context.CancelFunc
		for range 10 {
			switch rng.Intn(3) {
			case 0:
				c, cancel := context.WithCancel(ctx)
				kids, cancels = append(kids, c), append(cancels, cancel)
			case 1:
				c, cancel := context.WithTimeout(ctx, time.Hour)
				kids, cancels = append(kids, c), append(cancels, cancel)
			case 2:
				var n atomic.Int32
				stop := context.AfterFunc(ctx, func() {
					if n.Add(1) > 1 {
						ranTwice.Add(1)
					}
				})
				if rng.Intn(2) == 0 && stop() {
					// Stopped: must never run.
					pending.Add(1)
					go func() {
						defer pending.Done()
						<-ctx.Done()
						time.Sleep(20 * time.Millisecond)
						if n.Load() != 0 {
							bad.Add(1)
						}
					}()
				}
			}
		}
		// Cancel a few children early.
		for i, cancel := range cancels {
			if i%3 == 0 {
				cancel()
			}
		}
		pending.Add(1)
		go func() {
			defer pending.Done()
			<-ctx.Done()
			for _, k := range kids {
				select {
				case <-k.Done():
				case <-time.After(5 * time.Second):
					bad.Add(1)
				}
			}
			for _, cancel := range cancels {
				cancel()
			}
		}()
		time.Sleep(time.Duration(rng.Intn(2000)) * time.Microsecond)
	}
	_, addr := reviewServer(t, watch)
	tc := leanClient(t, addr)
	if _, err := tc.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	pending.Wait()
	base := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for range 40 {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.Intn(2) == 0 {
					time.AfterFunc(time.Duration(rng.Intn(2000))*time.Microsecond, cancel)
				}
				_, err := tc.EmptyCall(ctx, &testpb.Empty{})
				if c := status.Code(err); c != codes.OK && c != codes.Canceled {
					t.Errorf("call: %v", err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	pending.Wait()
	if bad.Load() != 0 || ranTwice.Load() != 0 {
		t.Errorf("%d derived contexts not ended or stopped AfterFuncs run, %d AfterFuncs run twice", bad.Load(), ranTwice.Load())
	}
	checkGoroutines(t, base)
}
