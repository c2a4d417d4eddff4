package leangrpc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// goroutineID returns the calling goroutine's id, from its stack trace's
// first line ("goroutine 123 [running]:").
func goroutineID() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	buf = bytes.TrimPrefix(buf, []byte("goroutine "))
	if i := bytes.IndexByte(buf, ' '); i > 0 {
		buf = buf[:i]
	}
	id, _ := strconv.Atoi(string(buf))
	return id
}

// workersServer serves TestService with a stream interceptor that records
// the goroutine each stream's handler runs on; a stream with "hold"
// metadata waits for release (or its context) first, after a send on held.
type workersServer struct {
	s       *leangrpc.Server
	addr    string
	release chan struct{}
	held    chan struct{}

	mu  sync.Mutex
	ids map[int]int // goroutine id: streams run on it
}

func newWorkersServer(t *testing.T, idle time.Duration, opts ...leangrpc.ServerOption) *workersServer {
	t.Helper()
	ws := &workersServer{release: make(chan struct{}), held: make(chan struct{}, 1), ids: map[int]int{}}
	icpt := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ws.mu.Lock()
		ws.ids[goroutineID()]++
		ws.mu.Unlock()
		if md, _ := metadata.FromIncomingContext(ss.Context()); len(md.Get("hold")) > 0 {
			ws.held <- struct{}{}
			select {
			case <-ws.release:
			case <-ss.Context().Done():
				return ss.Context().Err()
			}
		}
		return h(srv, ss)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ws.s = leangrpc.NewServer(append(opts, leangrpc.StreamInterceptor(icpt))...)
	if idle > 0 {
		leangrpc.SetWorkerIdleTimeout(ws.s, idle)
	}
	testgrpc.RegisterTestServiceServer(ws.s, interop.NewTestServer())
	go ws.s.Serve(lis)
	t.Cleanup(ws.s.Stop)
	ws.addr = lis.Addr().String()
	return ws
}

// waitNoWorkers waits until the server has no worker left.
func waitNoWorkers(t *testing.T, s *leangrpc.Server, after string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for leangrpc.HandlerWorkers(s) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers 5 s %s", leangrpc.HandlerWorkers(s), after)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closableClient is leanClient for tests that close it themselves.
func closableClient(t *testing.T, addr string) (testgrpc.TestServiceClient, func()) {
	t.Helper()
	cc, err := leangrpc.NewClient(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return testgrpc.NewTestServiceClient(cc), func() { cc.Close() }
}

// distinct returns the number of goroutines the handlers ran on.
func (ws *workersServer) distinct() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.ids)
}

// fullDuplex makes one FullDuplexCall that sends nothing and reads to its
// end.
func fullDuplex(ctx context.Context, c testgrpc.TestServiceClient) error {
	st, err := c.FullDuplexCall(ctx)
	if err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// Calls one after another run on the few goroutines the server keeps,
// not on a new goroutine each.
func TestHandlerWorkersReused(t *testing.T) {
	ws := newWorkersServer(t, time.Hour, leangrpc.NumStreamWorkers(2))
	c := leanClient(t, ws.addr)
	const calls = 60
	for i := range calls {
		if err := fullDuplex(ctxT(t), c); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// A call can come before the previous call's worker is idle again,
	// and then runs on a second worker or, with both busy, a goroutine
	// of its own; most calls find an idle worker.
	if n := ws.distinct(); n > calls/2 {
		t.Errorf("%d calls ran on %d goroutines, want most of them on the 2 workers", calls, n)
	}
	if n := leangrpc.HandlerWorkers(ws.s); n < 1 || n > 2 {
		t.Errorf("%d workers after the calls, want 1 or 2 (NumStreamWorkers(2), no idle timeout)", n)
	}
}

// A handler that blocks holds up no other call on its connection, however
// few workers there are: a call that finds none idle runs on a goroutine of
// its own.
func TestBlockingHandlerDoesNotStallOthers(t *testing.T) {
	for _, workers := range []uint32{1, 0} {
		t.Run("NumStreamWorkers="+strconv.Itoa(int(workers)), func(t *testing.T) {
			ws := newWorkersServer(t, 0, leangrpc.NumStreamWorkers(workers))
			c := leanClient(t, ws.addr)
			ctx := ctxT(t)
			held := make(chan error, 1)
			go func() { held <- fullDuplex(metadata.AppendToOutgoingContext(ctx, "hold", "1"), c) }()
			<-ws.held

			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- fullDuplex(ctx, c)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("call beside the blocked one: %v", err)
				}
			}
			select {
			case err := <-held:
				t.Fatalf("the blocked call ended before its release: %v", err)
			default:
			}
			close(ws.release)
			if err := <-held; err != nil {
				t.Errorf("the blocked call after its release: %v", err)
			}
		})
	}
}

// Stop ends the idle workers at once, however long they would wait for a
// call, and the busy ones when their calls end.
func TestStopEndsHandlerWorkers(t *testing.T) {
	base := runtime.NumGoroutine()
	ws := newWorkersServer(t, time.Hour)
	c, closeClient := closableClient(t, ws.addr)
	defer closeClient()
	ctx := ctxT(t)
	held := make(chan error, 1)
	go func() { held <- fullDuplex(metadata.AppendToOutgoingContext(ctx, "hold", "1"), c) }()
	<-ws.held
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := fullDuplex(ctx, c); err != nil {
					t.Errorf("call: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if n := leangrpc.HandlerWorkers(ws.s); n < 2 {
		t.Fatalf("%d workers after concurrent calls with one held, want the held one's and an idle one", n)
	}
	ws.s.Stop()
	if err := <-held; err == nil {
		t.Errorf("the held call succeeded across Stop")
	}
	waitNoWorkers(t, ws.s, "after Stop")
	closeClient()
	checkGoroutines(t, base)
}

// GracefulStop ends the workers too.
func TestGracefulStopEndsHandlerWorkers(t *testing.T) {
	base := runtime.NumGoroutine()
	ws := newWorkersServer(t, time.Hour)
	c, closeClient := closableClient(t, ws.addr)
	defer closeClient()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fullDuplex(ctxT(t), c); err != nil {
				t.Errorf("call: %v", err)
			}
		}()
	}
	wg.Wait()
	if leangrpc.HandlerWorkers(ws.s) == 0 {
		t.Fatal("no worker after the calls")
	}
	ws.s.GracefulStop()
	waitNoWorkers(t, ws.s, "after GracefulStop")
	closeClient()
	checkGoroutines(t, base)
}

// Workers that wait for a call longer than their idle timeout exit, so that
// a server that stays up but idle keeps none.
func TestIdleHandlerWorkersExit(t *testing.T) {
	ws := newWorkersServer(t, 20*time.Millisecond)
	c := leanClient(t, ws.addr)
	if err := fullDuplex(ctxT(t), c); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := fullDuplex(ctxT(t), c); err != nil {
					t.Errorf("call: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if leangrpc.HandlerWorkers(ws.s) == 0 {
		t.Log("the workers exited before the check") // possible on a slow machine
	}
	waitNoWorkers(t, ws.s, "after the last call, with a 20 ms idle timeout")
	// The server still serves, on new workers.
	if err := fullDuplex(ctxT(t), c); err != nil {
		t.Fatalf("call after the workers exited: %v", err)
	}
}
