package leangrpc_test

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// TestGracefulStopUnderLoad: GracefulStop while 200 callers keep making
// unary calls, from each client stack. Every call the server accepted
// (its handler ran) completes OK at the client; the calls that were not
// accepted fail with Unavailable (grpc-go's client may first retry them
// transparently); GracefulStop returns once the accepted calls are done;
// nothing leaks.
func TestGracefulStopUnderLoad(t *testing.T) {
	for _, leanClient := range []bool{true, false} {
		name := "grpc-client"
		if leanClient {
			name = "lean-client"
		}
		t.Run(name, func(t *testing.T) { gracefulStopUnderLoad(t, leanClient) })
	}
}

func gracefulStopUnderLoad(t *testing.T, leanClient bool) {
	const callers = 200
	runtime.GC()
	base := runtime.NumGoroutine()
	var accepted, handled atomic.Int64
	hold := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		accepted.Add(1)
		time.Sleep(5 * time.Millisecond) // keeps calls in flight
		resp, err := h(ctx, req)
		if err == nil {
			handled.Add(1)
		}
		return resp, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer(leangrpc.UnaryInterceptor(hold))
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	served := make(chan struct{})
	go func() { s.Serve(lis); close(served) }()

	cc, closeClient := newClient(t, leanClient, lis.Addr().String(), clientSettings{})
	tc := testgrpc.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var ok atomic.Int64
	var mu sync.Mutex
	failures := map[codes.Code]int{}
	var other []error
	stopCalls := make(chan struct{})
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &testpb.SimpleRequest{ResponseSize: 100}
			for {
				select {
				case <-stopCalls:
					return
				default:
				}
				_, err := tc.UnaryCall(ctx, req)
				if err == nil {
					ok.Add(1)
					continue
				}
				mu.Lock()
				failures[status.Code(err)]++
				if status.Code(err) != codes.Unavailable && len(other) < 5 {
					other = append(other, err)
				}
				mu.Unlock()
			}
		}()
	}
	// Let calls run until well over 100 were accepted, then stop while
	// they go on.
	for accepted.Load() < 4*callers {
		if ctx.Err() != nil {
			t.Fatal("the calls did not start")
		}
		time.Sleep(time.Millisecond)
	}
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	time.Sleep(200 * time.Millisecond) // new calls keep coming
	close(stopCalls)
	wg.Wait()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("GracefulStop did not return")
	}
	<-served
	closeClient()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d accepted, %d OK, failures by code %v", accepted.Load(), ok.Load(), failures)
	if ok.Load() != accepted.Load() || handled.Load() != accepted.Load() {
		t.Errorf("%d calls accepted, %d handled, %d OK at the client: every accepted call must complete OK", accepted.Load(), handled.Load(), ok.Load())
	}
	for code, n := range failures {
		if code != codes.Unavailable {
			t.Errorf("%d calls failed with %v, want Unavailable (e.g. %v)", n, code, other)
		}
	}
	if failures[codes.Unavailable] == 0 {
		t.Error("no call failed after GracefulStop: the test did not send calls after it")
	}
	checkGoroutines(t, base)
}
