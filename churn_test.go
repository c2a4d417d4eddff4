package leangrpc_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// churnHeapSlack is how far the heap in use may end above its baseline
// after the churn: above what the runtime and the pools keep between
// collections. A leak of a kilobyte per connection passes it within the
// default run's thousands of connections; a smaller one needs a longer
// run (LEANGRPC_CHURN_SECONDS), which churns proportionally more.
const churnHeapSlack = 8 << 20

// churnGoroutineSlack allows goroutines of the runtime and the test
// framework that come and go on their own (a timer's, a finalizer's).
const churnGoroutineSlack = 2

// churnCallTimeout bounds each call of the churn, which takes
// milliseconds: a call that waits it out sat on a connection that hung.
const churnCallTimeout = 5 * time.Second

// TestChurnReturnsToBaseline opens and closes client connections at a high
// rate against one server, in every way a connection ends: a client that
// closes after its call, one that closes with a stream left half-done, one
// that closes in the middle of a call, the network dropping a connection
// under the server, and the server ending connections by age (GOAWAY,
// then a forced close after the grace). Every call ends as one of those
// closes explains, never by waiting out its deadline. Afterwards
// goroutines, open descriptors, pool buffers, the server's memory budget
// and the heap in use must be back at their baseline: a leak per
// connection shows as growth proportional to the thousands of connections
// churned. A connection that hangs with no goroutine (waiting in the idle
// poller) escapes the goroutine count, hence the deadline check.
//
// It churns for 5 s; LEANGRPC_CHURN_SECONDS=<seconds> runs it that long.
func TestChurnReturnsToBaseline(t *testing.T) {
	d := 5 * time.Second
	if v, err := strconv.ParseFloat(os.Getenv("LEANGRPC_CHURN_SECONDS"), 64); err == nil && v > 0 {
		d = time.Duration(v * float64(time.Second))
	}
	base := takeChurnSnapshot()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc := &serverConns{Listener: lis}
	s := leangrpc.NewServer(leangrpc.KeepaliveParams(keepalive.ServerParameters{
		// Short enough that some connections meet it mid-call.
		MaxConnectionAge:      20 * time.Millisecond,
		MaxConnectionAgeGrace: 10 * time.Millisecond,
	}))
	baseMem := leangrpc.MemoryInUse(s)
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	served := make(chan struct{})
	go func() { defer close(served); s.Serve(sc) }()
	addr := lis.Addr().String()
	// The serving server's own goroutines and descriptors, for the check
	// before Stop.
	serving := takeChurnSnapshot()

	var counts churnCounts
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for time.Now().Before(end) && !t.Failed() {
				churnOne(t, addr, r, &counts)
			}
		}()
	}
	// The server's side: a connection dropped under it every 2–6 ms.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(99, 2))
		for time.Now().Before(end) {
			time.Sleep(time.Duration(2+r.IntN(5)) * time.Millisecond)
			if sc.dropOne(r) {
				counts.serverDrops.Add(1)
			}
		}
	}()
	wg.Wait()
	elapsed := d + time.Since(end)
	conns := counts.conns.Load()
	t.Logf("churned %d connections in %v (%.0f/s): %d calls answered, %d failed as a close explains, %d streams left half-done, %d clients closed mid-call, %d connections dropped under the server",
		conns, elapsed.Round(time.Millisecond), float64(conns)/elapsed.Seconds(),
		counts.ok.Load(), counts.failed.Load(), counts.halfDone.Load(), counts.midCall.Load(), counts.serverDrops.Load())
	if counts.ok.Load() == 0 {
		t.Error("no call was answered")
	}

	// Before Stop, which would close what the server forgot: the server
	// must have ended every connection its client closed or the network
	// dropped, on its own.
	open := awaitBaseline(t, "with the server serving", serving, s, baseMem)
	t.Logf("server serving, before → after the churn: goroutines %d → %d, descriptors %d → %d",
		serving.goroutines, open.goroutines, serving.fds, open.fds)
	s.Stop()
	<-served
	sc.forget()
	after := awaitBaseline(t, "after Stop", base, s, baseMem)
	t.Logf("baseline → after: goroutines %d → %d, descriptors %d → %d, pool buffers %d → %d, heap in use %.1f → %.1f MiB, RSS %.1f → %.1f MiB (not checked: the runtime returns memory to the OS lazily)",
		base.goroutines, after.goroutines, base.fds, after.fds, base.bufs, after.bufs,
		mib(base.heap), mib(after.heap), mib(base.rss), mib(after.rss))
}

// awaitBaseline waits, a bounded time, for the process to be back at
// want: goroutines within churnGoroutineSlack, no more descriptors or pool
// buffers, the heap in use within churnHeapSlack and the server's memory
// budget at baseMem. Closed connections end their goroutines and free
// their buffers shortly after Close returns, not at once, and the server's
// idle handler workers exit a second after their last call
// (workerIdleTimeout). It reports what is not back, naming when, and
// returns what it saw last.
func awaitBaseline(t *testing.T, when string, want churnSnapshot, s *leangrpc.Server, baseMem int64) churnSnapshot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got churnSnapshot
	for {
		got = takeChurnSnapshot()
		back := got.goroutines <= want.goroutines+churnGoroutineSlack &&
			got.fds <= want.fds &&
			got.bufs <= want.bufs &&
			got.heap <= want.heap+churnHeapSlack &&
			leangrpc.MemoryInUse(s) == baseMem
		if back || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.goroutines > want.goroutines+churnGoroutineSlack {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%s: %d goroutines after the churn, %d before (slack %d)\n%s", when, got.goroutines, want.goroutines, churnGoroutineSlack, buf)
	}
	if want.fds >= 0 && got.fds > want.fds {
		t.Errorf("%s: %d descriptors open after the churn, %d before", when, got.fds, want.fds)
	}
	if got.bufs > want.bufs {
		t.Errorf("%s: %d pool buffers outstanding after the churn, %d before", when, got.bufs, want.bufs)
	}
	if m := leangrpc.MemoryInUse(s); m != baseMem {
		t.Errorf("%s: the server's memory budget has %d bytes charged after the churn, %d before", when, m, baseMem)
	}
	if got.heap > want.heap+churnHeapSlack {
		t.Errorf("%s: heap in use %.1f MiB after the churn, %.1f MiB before (slack %.0f MiB)", when, mib(got.heap), mib(want.heap), mib(churnHeapSlack))
	}
	return got
}

// churnCounts are what the churn did, for its log line.
type churnCounts struct {
	conns, ok, failed, halfDone, midCall, serverDrops atomic.Int64
}

// churnOne is one client's life: dial, one unary call, then one of three
// endings chosen by r.
func churnOne(t *testing.T, addr string, r *rand.Rand, counts *churnCounts) {
	cc, err := leangrpc.NewClient(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Errorf("NewClient: %v", err)
		return
	}
	counts.conns.Add(1)
	defer cc.Close()
	tc := testgrpc.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), churnCallTimeout)
	defer cancel()
	count := func(err error) {
		if err == io.EOF { // a stream's end
			err = nil
		}
		switch status.Code(err) {
		case codes.OK:
			counts.ok.Add(1)
		case codes.Canceled, codes.Unavailable: // the client closed, or the connection ended under the call
			counts.failed.Add(1)
		case codes.DeadlineExceeded:
			t.Errorf("a call waited out its %v deadline: its connection hung: %v", churnCallTimeout, err)
		default:
			t.Errorf("a call failed in a way no close explains: %v", err)
		}
	}
	count(unaryErr(tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: int32(r.IntN(2048)), Payload: payload(r.IntN(2048))})))

	switch r.IntN(4) {
	case 0:
		// A stream left half-done: one message each way, no CloseSend,
		// and a second response still on its way when the client closes.
		counts.halfDone.Add(1)
		st, err := tc.FullDuplexCall(ctx)
		if err != nil {
			count(err)
			return
		}
		err = st.Send(&testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: 64}, {Size: 64, IntervalUs: 5000}},
			Payload:            payload(64),
		})
		if err == nil {
			_, err = st.Recv()
		}
		count(err)
	case 1:
		// Closed in the middle of a call: the client goes while the
		// server is still sending a slow stream of responses.
		counts.midCall.Add(1)
		closer := time.AfterFunc(time.Duration(r.IntN(3000))*time.Microsecond, func() { cc.Close() })
		defer closer.Stop()
		st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: 512}, {Size: 512, IntervalUs: 1000}, {Size: 512, IntervalUs: 1000}, {Size: 512, IntervalUs: 1000}},
		})
		for err == nil {
			_, err = st.Recv()
		}
		count(err)
	default:
		// A plain close after the call.
	}
}

func unaryErr(_ *testpb.SimpleResponse, err error) error { return err }

// serverConns is a listener that keeps the last connections it accepted,
// so that the churn can drop them under the server, as a network that
// resets them does.
type serverConns struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn // the most recent, at most 64: older ones have ended
}

func (l *serverConns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		if len(l.conns) == 64 {
			l.conns = append(l.conns[:0], l.conns[1:]...)
		}
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// dropOne shuts one of the recent connections down both ways, at random,
// and reports whether there was one: the client reads the end of the
// stream, the server's reader wakes to it and the server must close the
// socket itself. Shut down rather than closed: the descriptor is the
// server's, and a Close behind its back would free the number while the
// server still holds it, for the next accept to reuse.
func (l *serverConns) dropOne(r *rand.Rand) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) == 0 {
		return false
	}
	i := r.IntN(len(l.conns))
	if c, ok := l.conns[i].(interface {
		CloseRead() error
		CloseWrite() error
	}); ok {
		c.CloseWrite()
		c.CloseRead()
	}
	l.conns = append(l.conns[:i], l.conns[i+1:]...)
	return true
}

// forget drops the references to the connections, which the server has
// closed, so that their memory counts as freed.
func (l *serverConns) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns = nil
}

// churnSnapshot is what the churn must leave as it found.
type churnSnapshot struct {
	goroutines int
	fds        int // -1 where /proc/self/fd does not exist
	bufs       int64
	heap       int64 // HeapInuse after a collection
	rss        int64 // logged only: 0 where /proc/self/statm does not exist
}

func takeChurnSnapshot() churnSnapshot {
	// Three collections with heapInUse's: sync.Pool keeps its contents
	// for one more cycle.
	runtime.GC()
	debug.FreeOSMemory()
	return churnSnapshot{
		goroutines: runtime.NumGoroutine(),
		fds:        openFDs(),
		bufs:       bufpool.Default().Outstanding(),
		heap:       heapInUse(),
		rss:        residentBytes(),
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
