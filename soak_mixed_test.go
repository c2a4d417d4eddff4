package leangrpc_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// killableConns tracks the client's connections so that the soak can drop
// them under the calls, as a network does.
type killableConns struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (k *killableConns) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err == nil {
		k.mu.Lock()
		k.conns = append(k.conns, c)
		k.mu.Unlock()
	}
	return c, err
}

// dropOne closes one of the connections made so far, at random.
func (k *killableConns) dropOne(r *rand.Rand) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.conns) == 0 {
		return
	}
	i := r.IntN(len(k.conns))
	k.conns[i].Close()
	k.conns = append(k.conns[:i], k.conns[i+1:]...)
}

// openFDs counts the process's open descriptors (Linux; -1 elsewhere).
func openFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}

// TestSoakMixed runs unary and streaming calls with random deadlines and
// cancels against a default server while the client's connections are
// dropped under them, then stops everything and checks that goroutines,
// pool buffers, descriptors and the memory budget are back at their
// baseline. Calls may fail only as the faults make them fail (deadline,
// cancel, a dropped connection); an accepted call is never answered
// wrongly. It runs 3 s; LEANGRPC_SOAK=<duration> runs it that long.
func TestSoakMixed(t *testing.T) {
	d := 3 * time.Second
	if v, err := time.ParseDuration(os.Getenv("LEANGRPC_SOAK")); err == nil && v > 0 {
		d = v
	}
	runtime.GC()
	baseG, baseBufs, baseFDs := runtime.NumGoroutine(), bufpool.Default().Outstanding(), openFDs()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer()
	baseMem := leangrpc.MemoryInUse(s)
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	served := make(chan struct{})
	go func() { defer close(served); s.Serve(lis) }()

	kc := &killableConns{}
	cc, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithInsecure(), leangrpc.WithContextDialer(kc.dial))
	if err != nil {
		t.Fatal(err)
	}
	tc := testgrpc.NewTestServiceClient(cc)

	var ok, faulted atomic.Int64
	// expected reports whether err is one the faults explain.
	expected := func(err error) bool {
		switch status.Code(err) {
		case codes.DeadlineExceeded, codes.Canceled, codes.Unavailable:
			return true
		}
		return false
	}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.IntN(50))*time.Millisecond)
				if r.IntN(8) == 0 {
					// Canceled at a random moment instead.
					time.AfterFunc(time.Duration(r.IntN(2000))*time.Microsecond, cancel)
				}
				var err error
				if w%2 == 0 {
					size := int32(r.IntN(4096))
					var resp *testpb.SimpleResponse
					resp, err = tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: size, Payload: payload(r.IntN(4096))})
					if err == nil && len(resp.GetPayload().GetBody()) != int(size) {
						t.Errorf("unary: a response of %d bytes, asked for %d", len(resp.GetPayload().GetBody()), size)
					}
				} else {
					err = soakStream(ctx, tc, r)
				}
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
				case expected(err):
					faulted.Add(1)
				default:
					t.Errorf("a call failed unexpectedly: %v", err)
					return
				}
			}
		}()
	}
	// The faults beside the calls: a client connection dropped every
	// 50–150 ms.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(99, 1))
		for time.Now().Before(end) {
			time.Sleep(time.Duration(50+r.IntN(100)) * time.Millisecond)
			kc.dropOne(r)
		}
	}()
	wg.Wait()
	t.Logf("%v: %d calls succeeded, %d failed by a deadline, a cancel or a dropped connection", d, ok.Load(), faulted.Load())
	if ok.Load() == 0 {
		t.Error("no call succeeded")
	}

	cc.Close()
	s.GracefulStop()
	<-served
	checkGoroutines(t, baseG)
	checkBuffers(t, baseBufs)
	deadline := time.Now().Add(5 * time.Second)
	for leangrpc.MemoryInUse(s) != baseMem && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m := leangrpc.MemoryInUse(s); m != baseMem {
		t.Errorf("memory budget: %d bytes charged after the soak, %d before", m, baseMem)
	}
	if baseFDs >= 0 {
		for openFDs() > baseFDs && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := openFDs(); n > baseFDs {
			t.Errorf("descriptors: %d open after the soak, %d before", n, baseFDs)
		}
	}
}

// soakStream runs a FullDuplexCall of a few messages, some answered after
// a delay, and checks each response's size.
func soakStream(ctx context.Context, tc testgrpc.TestServiceClient, r *rand.Rand) error {
	st, err := tc.FullDuplexCall(ctx)
	if err != nil {
		return err
	}
	for range 1 + r.IntN(4) {
		size := int32(r.IntN(2048))
		req := &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: size, IntervalUs: int32(r.IntN(3000))}},
			Payload:            payload(r.IntN(2048)),
		}
		if err := st.Send(req); err != nil {
			if errors.Is(err, io.EOF) {
				_, err = st.Recv() // the call's status
			}
			return err
		}
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		if got := len(resp.GetPayload().GetBody()); got != int(size) {
			return status.Errorf(codes.Internal, "stream: a response of %d bytes, asked for %d", got, size)
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); err != io.EOF {
		if err == nil {
			return status.Error(codes.Internal, "stream: a response after the last")
		}
		return err
	}
	return nil
}
