package leangrpc_test

import (
	"context"
	"math/rand"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Tests of the handler context (grpcwire.CallContext embedded in the
// server's rpc object): what it reports on each way a call can end, for
// itself and for contexts derived from it, compared with grpc-go's handler
// context (a context.WithTimeout/WithCancel of the connection's).

// ctxReport is what a handler saw of its context once it ended.
type ctxReport struct {
	err        error
	cause      error
	hasDL      bool
	dl         time.Time
	childErr   error // context.WithCancel(ctx)
	timedDL    time.Time
	timedErr   error // context.WithTimeout(ctx, time.Hour)
	afterRan   bool  // context.AfterFunc(ctx, f) ran
	stoppedRan bool  // an AfterFunc stopped before the end ran anyway
	stopOK     bool  // its stop reported true
	valueMD    string
	valuePeer  bool
	valueMeth  string
}

// watchCtx waits for ctx to end (at most 5 s) and reports what it and the
// contexts derived from it before the end say.
func watchCtx(ctx context.Context) *ctxReport {
	r := &ctxReport{}
	r.dl, r.hasDL = ctx.Deadline()
	child, cancelChild := context.WithCancel(context.WithValue(ctx, struct{}{}, 1))
	defer cancelChild()
	timed, cancelTimed := context.WithTimeout(ctx, time.Hour)
	defer cancelTimed()
	r.timedDL, _ = timed.Deadline()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	var stoppedFlag bool
	var mu sync.Mutex
	stop := context.AfterFunc(ctx, func() { mu.Lock(); stoppedFlag = true; mu.Unlock() })
	r.stopOK = stop()
	md, _ := metadata.FromIncomingContext(child)
	if v := md.Get("x-watch"); len(v) > 0 {
		r.valueMD = v[0]
	}
	_, r.valuePeer = peer.FromContext(child)
	r.valueMeth, _ = grpc.Method(child)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		return r
	}
	r.err = ctx.Err()
	r.cause = context.Cause(ctx)
	select {
	case <-child.Done():
		r.childErr = child.Err()
	case <-time.After(5 * time.Second):
	}
	select {
	case <-timed.Done():
		r.timedErr = timed.Err()
	case <-time.After(5 * time.Second):
	}
	select {
	case <-ran:
		r.afterRan = true
	case <-time.After(5 * time.Second):
	}
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	r.stoppedRan = stoppedFlag
	mu.Unlock()
	return r
}

// watchedServer serves TestService with an interceptor that hands each
// EmptyCall's context to watch before answering.
func watchedServer(t *testing.T, watch func(ctx context.Context)) (*leangrpc.Server, string) {
	t.Helper()
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == "/grpc.testing.TestService/EmptyCall" {
			watch(ctx)
		}
		return h(ctx, req)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer(leangrpc.UnaryInterceptor(icpt))
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return s, lis.Addr().String()
}

func checkEnded(t *testing.T, what string, r *ctxReport, want error) {
	t.Helper()
	if r.err != want || r.cause != want || r.childErr != want || r.timedErr != want || !r.afterRan {
		t.Errorf("%s: ctx %v cause %v, WithCancel child %v, WithTimeout child %v, AfterFunc ran %v; want %v everywhere",
			what, r.err, r.cause, r.childErr, r.timedErr, r.afterRan, want)
	}
	if !r.stopOK || r.stoppedRan {
		t.Errorf("%s: an AfterFunc stopped before the end: stop %v, ran %v", what, r.stopOK, r.stoppedRan)
	}
	if r.valueMD != "v" || !r.valuePeer || r.valueMeth != "/grpc.testing.TestService/EmptyCall" {
		t.Errorf("%s: values through a derived context: md %q peer %v method %q", what, r.valueMD, r.valuePeer, r.valueMeth)
	}
}

// TestServerDeadlineContext: a request with grpc-timeout from a client
// that never resets: the server's own timer must end the handler's context
// with DeadlineExceeded, and every derived context with it; the derived
// WithTimeout keeps the earlier deadline.
func TestServerDeadlineContext(t *testing.T) {
	got := make(chan *ctxReport, 1)
	_, addr := watchedServer(t, func(ctx context.Context) { got <- watchCtx(ctx) })
	p := scriptedTo(t, addr)
	start := time.Now()
	p.WriteHeaders(1, false, request("/grpc.testing.TestService/EmptyCall", "grpc-timeout", "100m", "x-watch", "v")...)
	p.WriteData(1, true, grpcFrame(0, nil))
	r := <-got
	checkEnded(t, "server deadline", r, context.DeadlineExceeded)
	if !r.hasDL || r.dl.Before(start) || r.dl.After(start.Add(time.Second)) {
		t.Errorf("Deadline() = %v, %v; want about %v", r.dl, r.hasDL, start.Add(100*time.Millisecond))
	}
	if !r.timedDL.Equal(r.dl) {
		t.Errorf("WithTimeout(ctx, 1h) deadline %v, want the parent's %v", r.timedDL, r.dl)
	}
	// grpc-go resets the stream with CANCEL when the deadline passes.
	f := p.WantOneOf(h2frame.TypeRSTStream, h2frame.TypeHeaders)
	if f.Type == h2frame.TypeRSTStream && f.ErrCode() != h2frame.ErrCodeCancel {
		t.Errorf("after the deadline: %v", f)
	}
}

// TestPeerResetContext: RST_STREAM from the client (any code) ends the
// handler's context with Canceled.
func TestPeerResetContext(t *testing.T) {
	for _, code := range []h2frame.ErrCode{h2frame.ErrCodeCancel, h2frame.ErrCodeInternal} {
		got := make(chan *ctxReport, 1)
		started := make(chan struct{}, 1)
		_, addr := watchedServer(t, func(ctx context.Context) { started <- struct{}{}; got <- watchCtx(ctx) })
		p := scriptedTo(t, addr)
		p.WriteHeaders(1, false, request("/grpc.testing.TestService/EmptyCall", "grpc-timeout", "20S", "x-watch", "v")...)
		p.WriteData(1, true, grpcFrame(0, nil))
		<-started
		time.Sleep(20 * time.Millisecond) // the handler registers its derived contexts
		p.WriteRST(1, code)
		r := <-got
		checkEnded(t, "peer RST "+code.String(), r, context.Canceled)
	}
}

// TestServerStopContext: Stop ends a handler's context with Canceled,
// derived contexts included.
func TestServerStopContext(t *testing.T) {
	got := make(chan *ctxReport, 1)
	started := make(chan struct{}, 1)
	s, addr := watchedServer(t, func(ctx context.Context) { started <- struct{}{}; got <- watchCtx(ctx) })
	p := scriptedTo(t, addr)
	p.WriteHeaders(1, false, request("/grpc.testing.TestService/EmptyCall", "x-watch", "v")...)
	p.WriteData(1, true, grpcFrame(0, nil))
	<-started
	time.Sleep(20 * time.Millisecond)
	go s.Stop()
	r := <-got
	checkEnded(t, "Stop", r, context.Canceled)
}

// TestHandlerCtxAfterReturn: a context kept past the handler's return
// is done (Canceled), contexts derived from it afterwards are done at once,
// AfterFunc on it runs, and its values still answer.
func TestHandlerCtxAfterReturn(t *testing.T) {
	kept := make(chan context.Context, 1)
	_, addr := watchedServer(t, func(ctx context.Context) { kept <- ctx })
	cc, err := leangrpc.NewClient(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	tc := testgrpc.NewTestServiceClient(cc)
	if _, err := tc.EmptyCall(metadata.AppendToOutgoingContext(ctxT(t), "x-watch", "v"), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	ctx := <-kept
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("handler context not done after the call")
	}
	if ctx.Err() != context.Canceled {
		t.Errorf("Err after return: %v", ctx.Err())
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case <-child.Done():
	default:
		t.Error("WithCancel of an ended handler context is not done")
	}
	if child.Err() != context.Canceled {
		t.Errorf("child Err %v", child.Err())
	}
	ran := make(chan struct{})
	if stop := context.AfterFunc(ctx, func() { close(ran) }); stop() {
		t.Error("AfterFunc stop after the end reported true")
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Error("AfterFunc on an ended handler context did not run")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if m, _ := grpc.Method(ctx); len(md.Get("x-watch")) != 1 || m != "/grpc.testing.TestService/EmptyCall" {
		t.Errorf("values after return: md %v method %q", md, m)
	}
	if _, ok := peer.FromContext(ctx); !ok {
		t.Error("no peer after return")
	}
	// A second call on the same connection must not change what the kept
	// context says (its rpc object is not reused).
	if _, err := tc.EmptyCall(metadata.AppendToOutgoingContext(ctxT(t), "x-watch", "w"), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	<-kept
	md, _ = metadata.FromIncomingContext(ctx)
	if v := md.Get("x-watch"); len(v) != 1 || v[0] != "v" || ctx.Err() != context.Canceled {
		t.Errorf("kept context after a second call: md %v err %v", md, ctx.Err())
	}
}

// TestDerivedContextsStress: concurrent calls whose handlers derive
// many contexts from the handler's (WithCancel, WithTimeout, AfterFunc,
// some canceled or stopped early) while clients cancel at random moments:
// every derived context still registered ends once the call ends, every
// AfterFunc not stopped runs exactly once, a stopped one never, and no
// goroutine is left (race detector clean).
func TestDerivedContextsStress(t *testing.T) {
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
	_, addr := watchedServer(t, watch)
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
