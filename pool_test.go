package leangrpc_test

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestUnaryPoolNoCrossTalk runs concurrent unary calls that end every
// way a pooled ClientStream (grpcwire unaryStreams) and a reused h2conn
// stream can end: OK with small and large (landing) responses, canceled at
// random moments (before the request, while waiting in the stream's waits,
// while a large response lands through RecvInto's AfterFunc watcher) and
// with tiny deadlines. Every successful call must see its own headers,
// trailers and response size (a ClientStream or stream object reused while
// an earlier call still used it would mix them), and the buffer pool and
// goroutines must return to their baselines.
func TestUnaryPoolNoCrossTalk(t *testing.T) {
	sockio.StartIdlePoller()
	for _, p := range []pair{pairs[0], pairs[2]} {
		t.Run(p.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			bufs := bufpool.Default().Outstanding()
			t.Run("body", func(t *testing.T) { poolNoCrossTalk(t, p) })
			checkGoroutines(t, base)
			checkBuffers(t, bufs)
		})
	}
}

func poolNoCrossTalk(t *testing.T, p pair) {
	e := setup(t, p, serverSettings{}, clientSettings{})
	const workers, perWorker = 8, 60
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := range perWorker {
				id := fmt.Sprintf("w%d-c%d", w, i)
				kind := poolCall(t, e.tc, rng, id)
				mu.Lock()
				counts[kind]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("outcomes: %v", counts)
	if counts["ok"] == 0 {
		t.Error("no call succeeded")
	}
	e.stop()
}

// poolCall makes one call and checks it; it returns its outcome.
func poolCall(t *testing.T, tc testgrpc.TestServiceClient, rng *rand.Rand, id string) string {
	size := 10 + rng.Intn(200)
	if rng.Intn(3) == 0 {
		size = 40<<10 + rng.Intn(200<<10) // spans frames: lands in place
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mode := rng.Intn(4)
	switch mode {
	case 1: // canceled at a random moment
		d := time.Duration(rng.Intn(3000)) * time.Microsecond
		time.AfterFunc(d, cancel)
	case 2: // a tiny deadline
		ctx, cancel = context.WithTimeout(ctx, time.Duration(50+rng.Intn(3000))*time.Microsecond)
		defer cancel()
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "x-grpc-test-echo-initial", id, "x-grpc-test-echo-trailing-bin", id)
	var header, trailer metadata.MD
	resp, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: int32(size), Payload: payload(rng.Intn(100))},
		grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		c := status.Code(err)
		if (mode == 1 && c == codes.Canceled) || (mode == 2 && c == codes.DeadlineExceeded) {
			return c.String()
		}
		t.Errorf("call %s (mode %d): %v", id, mode, err)
		return "error"
	}
	if got := len(resp.GetPayload().GetBody()); got != size {
		t.Errorf("call %s: response of %d bytes, want %d", id, got, size)
	}
	if h := header.Get("x-grpc-test-echo-initial"); len(h) != 1 || h[0] != id {
		t.Errorf("call %s: header echo %v", id, h)
	}
	if tr := trailer.Get("x-grpc-test-echo-trailing-bin"); len(tr) != 1 || tr[0] != id {
		t.Errorf("call %s: trailer echo %v", id, tr)
	}
	return "ok"
}
