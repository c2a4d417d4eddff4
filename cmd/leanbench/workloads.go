package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/sockio"
)

const (
	workloadUnary     = "unary"
	workloadStreaming = "streaming"
	workloadIdle      = "idle"
)

// config is one row of the results: a workload with its shape.
type config struct {
	workload    string
	reqSize     int
	respSize    int
	concurrency int
	connections int
	// tls runs the config over TLS (tls.go): the quick suite's second idle
	// row, or every config under -tls (overTLS). It is part of the row's
	// identity, so that the table, the JSON and compare keep a TLS row
	// apart from the plaintext row of the same shape.
	tls bool
}

func (c config) String() string {
	var s string
	if c.workload == workloadIdle {
		s = fmt.Sprintf("idle conns=%d", c.connections)
	} else {
		s = fmt.Sprintf("%s %s/%s calls=%d conns=%d", c.workload, sizeLabel(c.reqSize), sizeLabel(c.respSize), c.concurrency, c.connections)
	}
	if c.tls {
		s += " tls"
	}
	return s
}

// slug is the config in a form fit for a file name.
func (c config) slug() string {
	var s string
	if c.workload == workloadIdle {
		s = fmt.Sprintf("idle-n%d", c.connections)
	} else {
		s = fmt.Sprintf("%s-%s-%s-c%d-n%d", c.workload, sizeLabel(c.reqSize), sizeLabel(c.respSize), c.concurrency, c.connections)
	}
	if c.tls {
		s += "-tls"
	}
	return s
}

// workloadLabel is the config's workload as the tables' first column
// shows it: "idle tls" for a TLS row.
func (c config) workloadLabel() string {
	if c.tls {
		return c.workload + " tls"
	}
	return c.workload
}

// worker drives one call in flight: a sequence of unary RPCs, or one
// long-lived stream doing ping-pong.
type worker struct {
	raw    *rawCaller // the raw stack's caller; nil for the gRPC stacks
	client testpb.BenchmarkServiceClient
	opts   []grpc.CallOption                           // every call's: compressionOptions
	stream testpb.BenchmarkService_StreamingCallClient // nil for unary
	req    *testpb.SimpleRequest
	resp   *testpb.SimpleResponse // reused by streaming
	// The fields below are owned by the worker's goroutine until the run's
	// WaitGroup is done.
	hist Histogram
	ops  int64
	end  time.Time // when the last measured op completed
}

func (w *worker) setup(ctx context.Context, cc grpc.ClientConnInterface, cfg config, opts []grpc.CallOption) error {
	w.client = testpb.NewBenchmarkServiceClient(cc)
	w.opts = opts
	w.req = &testpb.SimpleRequest{
		ResponseType: testpb.PayloadType_COMPRESSABLE,
		ResponseSize: int32(cfg.respSize),
		Payload:      &testpb.Payload{Type: testpb.PayloadType_COMPRESSABLE, Body: zeroBody(cfg.reqSize)},
	}
	if cfg.workload != workloadStreaming {
		return nil
	}
	s, err := w.client.StreamingCall(ctx, w.opts...)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	if s == nil {
		return errors.New("open stream: nil stream and nil error")
	}
	w.stream = s
	w.resp = new(testpb.SimpleResponse)
	return nil
}

func (w *worker) op(ctx context.Context) error {
	if w.raw != nil {
		return w.raw.op()
	}
	if w.stream != nil {
		if err := w.stream.Send(w.req); err != nil {
			return fmt.Errorf("stream Send: %w", err)
		}
		if err := w.stream.RecvMsg(w.resp); err != nil {
			return fmt.Errorf("stream Recv: %w", err)
		}
		return nil
	}
	if _, err := w.client.UnaryCall(ctx, w.req, w.opts...); err != nil {
		return fmt.Errorf("UnaryCall: %w", err)
	}
	return nil
}

// closeStream ends the stream from the client side and waits for the
// server's end of stream.
func (w *worker) closeStream() error {
	if w.raw != nil {
		return w.raw.close()
	}
	if w.stream == nil {
		return nil
	}
	if err := w.stream.CloseSend(); err != nil {
		return err
	}
	if err := w.stream.RecvMsg(w.resp); err != io.EOF {
		return fmt.Errorf("want io.EOF after CloseSend, got %v", err)
	}
	return nil
}

// errBox keeps the first error of a run.
type errBox struct {
	mu  sync.Mutex
	err error
}

func (b *errBox) set(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
}

func (b *errBox) get() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

const runOneCmd = "run-one"

// runThroughput runs a unary or streaming workload once for one stack, in
// a child process (see child.go).
func (r *runner) runThroughput(st stack, cfg config, round int) Result {
	res := Result{
		Stack:       st.name,
		Workload:    cfg.workload,
		Shape:       &Shape{ReqSize: cfg.reqSize, RespSize: cfg.respSize, Concurrency: cfg.concurrency},
		Connections: cfg.connections,
		TLS:         cfg.tls,
		Round:       round,
	}
	timeout := runTimeout(r.opts.timeout, cfg)
	// A baseline runs against itself only (parseStacks): its child knows
	// it by its own name.
	exe, childStack := st.client.child()
	if exe == "" {
		childStack = st.name
	}
	args := []string{runOneCmd,
		"-stack", childStack, "-workload", cfg.workload,
		"-reqSize", strconv.Itoa(cfg.reqSize), "-respSize", strconv.Itoa(cfg.respSize),
		"-concurrency", strconv.Itoa(cfg.concurrency), "-connections", strconv.Itoa(cfg.connections),
		"-round", strconv.Itoa(round),
		"-benchtime", r.opts.benchtime.String(), "-warmup", r.opts.warmup.String(), "-timeout", timeout.String(),
		"-compression", r.opts.compression,
		"-backends", strconv.Itoa(r.opts.backends), "-lb", r.opts.lb,
	}
	args = append(args, r.security(cfg).childArgs()...)
	base := r.profileBase(st, cfg, round)
	if r.opts.cpuprofile != "" {
		args = append(args, "-cpuprofile", withSuffix(r.opts.cpuprofile, base))
	}
	if r.opts.memprofile != "" {
		args = append(args, "-memprofile", withSuffix(r.opts.memprofile, base), "-memprofilerate", strconv.Itoa(r.opts.memProfileRate))
	}
	limit := r.opts.warmup + r.opts.benchtime + 3*timeout + 15*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c, err := startChild(ctx, st.name+" run", exe, args...)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer c.finish()
	m, err := c.read()
	switch {
	case err != nil:
		res.Error = err.Error()
		printHead(r.stderr, c.stderr.String(), 20)
	case m.Result == nil:
		res.Error = "run-one child answered without a result"
	default:
		res = *m.Result
		res.Stack = st.name // a baseline's child knows itself by another name
		res.TLS = cfg.tls   // the child knows its certificate, not the row
		c.finish()
		c.forwardStderr(r.stderr)
	}
	return res
}

// slowTransfer is the rate, in bytes per second, at which a run's time
// bounds let every call in flight move one request and one response, on
// top of -timeout. With small messages it adds nothing that matters; with
// 16 streams of 16 MiB (-chart's top) one round trip of every stream is
// 512 MiB, which takes a few seconds on a small machine and more on a
// busy one, and -timeout alone would turn a slow run into an error row.
const slowTransfer = 50e6

// runTimeout is the -timeout that a throughput run of cfg gets: the
// user's, plus the time to move the bytes of one op of every call in
// flight at slowTransfer.
func runTimeout(timeout time.Duration, cfg config) time.Duration {
	bytes := float64(cfg.concurrency) * float64(cfg.reqSize+cfg.respSize)
	return timeout + time.Duration(bytes/slowTransfer*float64(time.Second))
}

// printHead writes the first n lines of s, indented.
func printHead(w io.Writer, s string, n int) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return
	}
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	for _, l := range lines {
		fmt.Fprintf(w, "    | %s\n", l)
	}
}

// runOne is the child side of runThroughput: it runs one workload in this
// process and writes the Result on stdout.
func runOne(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(runOneCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	stackName := fs.String("stack", stackGrpc, "stack")
	var cfg config
	var round int
	var o options
	fs.StringVar(&cfg.workload, "workload", workloadUnary, "unary or streaming")
	fs.IntVar(&cfg.reqSize, "reqSize", 100, "request payload bytes")
	fs.IntVar(&cfg.respSize, "respSize", 100, "response payload bytes")
	fs.IntVar(&cfg.concurrency, "concurrency", 1, "calls in flight")
	fs.IntVar(&cfg.connections, "connections", 1, "client connections")
	fs.IntVar(&round, "round", 1, "round number, for the result")
	fs.DurationVar(&o.benchtime, "benchtime", time.Second, "measured time")
	fs.DurationVar(&o.warmup, "warmup", 0, "unmeasured time before")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Second, "see leanbench -timeout")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "CPU profile file")
	fs.StringVar(&o.memprofile, "memprofile", "", "allocation profile file")
	fs.IntVar(&o.memProfileRate, "memprofilerate", 0, "runtime.MemProfileRate")
	fs.StringVar(&o.compression, "compression", "", "compressor of the client's calls")
	fs.IntVar(&o.backends, "backends", 1, "servers (see leanbench -backends)")
	fs.StringVar(&o.lb, "lb", "", "load-balancing policy (see leanbench -lb)")
	certFile := fs.String("tlscert", "", "TLS certificate file (with -tlskey: TLS, see leanbench -tls)")
	keyFile := fs.String("tlskey", "", "TLS key file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	enc := json.NewEncoder(stdout)
	sec, err := childTLS(*certFile, *keyFile)
	if err != nil {
		enc.Encode(childMsg{Error: err.Error()})
		return 2
	}
	// The parent passes the certificate for a TLS config only.
	o.tls, cfg.tls = sec, sec != nil
	sts, err := parseStacks(*stackName)
	if err != nil || len(sts) != 1 || cfg.concurrency < 1 || cfg.connections < 1 || checkCompression(o.compression) != nil || o.backends < 1 || checkLB(o.lb) != nil {
		enc.Encode(childMsg{Error: fmt.Sprintf("run-one: bad arguments %q", args)})
		return 2
	}
	if o.memprofile != "" && o.memProfileRate > 0 {
		runtime.MemProfileRate = o.memProfileRate
	}
	r := &runner{opts: o, stdout: stdout, stderr: stderr}
	res := Result{
		Stack:       sts[0].name,
		Workload:    cfg.workload,
		Shape:       &Shape{ReqSize: cfg.reqSize, RespSize: cfg.respSize, Concurrency: cfg.concurrency},
		Connections: cfg.connections,
		TLS:         cfg.tls,
		Round:       round,
	}
	if sts[0].client.name != stackGrpc || sts[0].server.name != stackGrpc {
		startLeanHelpers()
	}
	g0 := runtime.NumGoroutine()
	fig, err := r.measureThroughput(sts[0], cfg)
	if err != nil {
		res.Error = err.Error()
	} else {
		res.Figures = fig
	}
	enc.Encode(childMsg{Result: &res})
	// Tell (on stderr, which the parent forwards) when the stack leaves
	// goroutines behind after its connections and server are closed.
	if left := waitGoroutines(g0, time.Second); left > 0 && err == nil {
		fmt.Fprintf(stderr, "warning: %d goroutines still running 1s after the run ended\n", left)
	}
	return 0
}

// measureThroughput runs one workload in this process, client and server
// together, and measures it.
func (r *runner) measureThroughput(st stack, cfg config) (*Figures, error) {
	sec := r.security(cfg)
	var addrs []string
	for range r.opts.backends {
		srv, err := startServer(st.server, sec)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := srv.stop(); err != nil {
				r.progressf("warning: %v", err)
			}
		}()
		addrs = append(addrs, srv.addr)
	}
	balanced := r.opts.backends > 1 || r.opts.lb != ""

	isRaw := st.client.name == stackRaw
	conns := make([]grpc.ClientConnInterface, cfg.connections)
	if isRaw {
		// Raw workers dial a connection each, in setup.
		conns = conns[:1]
	}
	var closers []func() error
	defer func() {
		ok := within(5*time.Second, func() {
			for _, c := range closers {
				c()
			}
		})
		if !ok {
			r.progressf("warning: %s client: Close did not return within 5s", st.client.name)
		}
	}()
	for i := range conns {
		if isRaw {
			break
		}
		var cc grpc.ClientConnInterface
		var closeFn func() error
		var err error
		if balanced {
			cc, closeFn, err = dialBalanced(st.client, addrs, r.opts.lb, sec)
		} else {
			cc, closeFn, err = dialSafe(st.client, addrs[0], sec, nil)
		}
		if err != nil {
			return nil, err
		}
		conns[i] = cc
		closers = append(closers, closeFn)
		if sec != nil {
			// One call more per connection before the warmup, over TLS
			// only: plaintext runs stay as they were.
			ctx, cancel := context.WithTimeout(context.Background(), r.opts.timeout)
			err = checkConnSecurity(ctx, cc, sec)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s connection %d: %w", st.name, i, err)
			}
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var firstErr errBox
	fail := func(err error) {
		firstErr.set(err)
		cancel()
	}

	workers := make([]*worker, cfg.concurrency)
	var ready, done sync.WaitGroup
	var nReady atomic.Int32 // workers through setup and warmup
	start := make(chan struct{})
	var deadline time.Time // written before start is closed
	warmupEnd := time.Now().Add(r.opts.warmup)
	for i := range workers {
		w := new(worker)
		workers[i] = w
		ready.Add(1)
		done.Add(1)
		go func(cc grpc.ClientConnInterface) {
			defer done.Done()
			isReady := false
			defer func() {
				if p := recover(); p != nil {
					fail(fmt.Errorf("%s client panicked: %v", st.client.name, p))
				}
				if !isReady {
					ready.Done()
				}
			}()
			var err error
			if isRaw {
				w.raw, err = dialRaw(ctx, addrs[0], sec, cfg)
			} else {
				err = w.setup(ctx, cc, cfg, compressionOptions(r.opts.compression))
			}
			if err != nil {
				fail(err)
				return
			}
			// Warm up; at least one op, which also checks that the stack
			// works at all.
			for {
				if err := w.op(ctx); err != nil {
					fail(err)
					return
				}
				if !time.Now().Before(warmupEnd) {
					break
				}
			}
			isReady = true
			nReady.Add(1)
			ready.Done()
			select {
			case <-start:
			case <-ctx.Done():
				return
			}
			t := time.Now()
			for t.Before(deadline) {
				if err := w.op(ctx); err != nil {
					fail(err)
					return
				}
				t1 := time.Now()
				w.hist.Record(t1.Sub(t))
				w.ops++
				w.end = t1
				t = t1
			}
		}(conns[i%len(conns)])
	}

	// -timeout bounds dialing, opening streams and the first RPC of each
	// worker, on top of the warmup time.
	if limit := r.opts.warmup + r.opts.timeout; !waitTimeout(&ready, limit) {
		fail(fmt.Errorf("setup and warmup did not finish within %v (%d of %d calls in flight got through)", limit, nReady.Load(), cfg.concurrency))
	}
	if err := firstErr.get(); err != nil {
		cancel()
		waitTimeout(&done, 5*time.Second)
		return nil, err
	}

	if r.opts.memprofile != "" {
		r.writeAllocsProfile(r.opts.memprofile + ".base")
	}
	if r.opts.cpuprofile != "" {
		if f, err := os.Create(r.opts.cpuprofile); err != nil {
			r.progressf("warning: cpuprofile: %v", err)
		} else {
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				r.progressf("warning: cpuprofile: %v", err)
			} else {
				defer pprof.StopCPUProfile()
			}
		}
	}

	before := takeSnapshot()
	deadline = before.t.Add(r.opts.benchtime)
	close(start)
	// The last RPC of each worker may overrun -benchtime by -timeout.
	if !waitTimeout(&done, r.opts.benchtime+r.opts.timeout) {
		fail(fmt.Errorf("measured phase did not finish within -timeout %v after -benchtime", r.opts.timeout))
		waitTimeout(&done, 5*time.Second)
	}
	after := takeSnapshot()
	if r.opts.cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	if r.opts.memprofile != "" {
		r.writeAllocsProfile(r.opts.memprofile)
	}
	if err := firstErr.get(); err != nil {
		return nil, err
	}

	if cfg.workload == workloadStreaming {
		ok := within(5*time.Second, func() {
			for _, w := range workers {
				if err := w.closeStream(); err != nil {
					firstErr.set(fmt.Errorf("closing stream: %w", err))
					return
				}
			}
		})
		if !ok {
			return nil, errors.New("closing streams did not finish within 5s")
		}
		if err := firstErr.get(); err != nil {
			return nil, err
		}
	}

	var hist Histogram
	var ops int64
	end := before.t
	for _, w := range workers {
		hist.Merge(&w.hist)
		ops += w.ops
		if w.end.After(end) {
			end = w.end
		}
	}
	if ops == 0 {
		return nil, errors.New("no RPC completed in the measured phase")
	}
	secs := end.Sub(before.t).Seconds()
	n := float64(ops)
	return &Figures{
		Seconds:        secs,
		Ops:            ops,
		OpsPerSec:      n / secs,
		AllocsPerOp:    float64(after.mallocs-before.mallocs) / n,
		BytesPerOp:     float64(after.totalAlloc-before.totalAlloc) / n,
		CPUMicrosPerOp: micros(after.cpu-before.cpu) / n,
		MBPerSec:       float64(cfg.reqSize+cfg.respSize) * n / secs / 1e6,
		Latency: Latency{
			P50:  micros(hist.Quantile(0.50)),
			P90:  micros(hist.Quantile(0.90)),
			P99:  micros(hist.Quantile(0.99)),
			Max:  micros(hist.Max()),
			Mean: micros(hist.Mean()),
		},
	}, nil
}

// waitTimeout waits for wg and reports whether it finished within d.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	return within(d, wg.Wait)
}

func (r *runner) writeAllocsProfile(path string) {
	runtime.GC() // the profile reflects the last completed GC
	f, err := os.Create(path)
	if err != nil {
		r.progressf("warning: memprofile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		r.progressf("warning: memprofile: %v", err)
	}
}

// startLeanHelpers starts leangrpc's two process-wide goroutines before a
// goroutine baseline: the idle waiter, which starts with the first
// connection that goes idle, and the role watcher, which starts with the
// first lone call. Both stay for the process's life: not a leak of a run,
// nor a cost of its connections.
func startLeanHelpers() {
	sockio.StartIdlePoller()
	h2conn.StartRoleWatcher()
}
