package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
)

// The idle workload opens N connections, makes one RPC on each and then
// leaves them idle. Server and client are separate child processes
// (idle-server and idle-client), so that each side's memory is measured
// on its own, against the same process before any connection.
//
// The conversation, one JSON line per message from each child:
//
//	server: {"addr": "127.0.0.1:port"}  baseline taken, serving
//	client: {"opened": 7000, ...}        once a second while opening (none when it is quick)
//	client: {"ready": true}              baseline taken, N connections made one RPC each
//	parent: "measure" to both
//	both:   {"side": {...}}              after -settle, GC and FreeOSMemory
//	parent: closes both stdins; the client closes its connections and exits, then the server.

const (
	idleServerCmd = "idle-server"
	idleClientCmd = "idle-client"
	idleDialers   = 16 // connections opened in parallel
)

// memFigures is one process's memory at one moment, after GC.
type memFigures struct {
	rss, heap, stack int64
	goroutines       int
}

func measureMem(settle time.Duration) memFigures {
	time.Sleep(settle)
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memFigures{
		rss:        residentBytes(),
		heap:       int64(ms.HeapInuse),
		stack:      int64(ms.StackInuse),
		goroutines: runtime.NumGoroutine(),
	}
}

func perConn(base, now memFigures, n int) *IdleSide {
	d := float64(n)
	return &IdleSide{
		RSSBytesPerConn:    float64(now.rss-base.rss) / d,
		HeapBytesPerConn:   float64(now.heap-base.heap) / d,
		StackBytesPerConn:  float64(now.stack-base.stack) / d,
		GoroutinesPerConn:  float64(now.goroutines-base.goroutines) / d,
		RSSBytes:           now.rss,
		BaselineRSSBytes:   base.rss,
		BaselineGoroutines: base.goroutines,
	}
}

// runIdle runs the idle workload once for one stack.
func (r *runner) runIdle(st stack, cfg config, round int) Result {
	res := Result{Stack: st.name, Workload: workloadIdle, Connections: cfg.connections, TLS: cfg.tls, Round: round}
	// run refused the sizes that do not fit (checkIdleLimits); this
	// planning gives the number of source addresses.
	plan, err := planIdle(cfg.connections, readIdleLimits())
	if err != nil {
		res.Error = err.Error()
		return res
	}
	srvSide, cliSide, err := r.measureIdle(st, plan, r.security(cfg))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Server, res.Client = srvSide, cliSide
	return res
}

// measureIdle runs the idle children of st for plan's connections, over
// TLS with sec when it is not nil.
func (r *runner) measureIdle(st stack, plan idlePlan, sec *benchTLS) (srvSide, cliSide *IdleSide, err error) {
	n := plan.conns
	// Bound the whole workload: dialing, settling, and teardown.
	limit := 4*r.opts.timeout + time.Duration(n)*5*time.Millisecond + 2*r.opts.settle
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	common := []string{"-connections", strconv.Itoa(n), "-settle", r.opts.settle.String(), "-timeout", r.opts.timeout.String(),
		"-compression", r.opts.compression}
	common = append(common, sec.childArgs()...)
	if r.opts.memprofile != "" {
		common = append(common, "-memprofilerate", strconv.Itoa(r.opts.memProfileRate))
	}
	heapFlag := func(side string) []string {
		if r.opts.memprofile == "" {
			return nil
		}
		name := strings.ReplaceAll(st.name, ">", fileSuffix)
		if sec != nil {
			// Apart from the plaintext row's (the quick suite has both).
			name += ".tls"
		}
		return []string{"-heapprofile", withSuffix(r.opts.memprofile, name+"."+side)}
	}

	srvExe, srvName := st.server.child()
	srv, err := startChild(ctx, st.server.name+" idle server", srvExe, append(append([]string{idleServerCmd, "-stack", srvName}, common...), heapFlag("server")...)...)
	if err != nil {
		return nil, nil, err
	}
	defer srv.finish()
	hello, err := srv.read()
	if err != nil {
		printHead(r.stderr, srv.stderr.String(), 20)
		return nil, nil, err
	}
	cliExe, cliName := st.client.child()
	cliArgs := []string{idleClientCmd, "-stack", cliName, "-addr", hello.Addr}
	if plan.sources > 1 {
		// Only when needed, so that a -baseline binary from before
		// -sources still runs every size that needs none.
		cliArgs = append(cliArgs, "-sources", strconv.Itoa(plan.sources))
	}
	cli, err := startChild(ctx, st.client.name+" idle client", cliExe, append(append(cliArgs, common...), heapFlag("client")...)...)
	if err != nil {
		return nil, nil, err
	}
	defer cli.finish() // before the server's: the client closes first
	// fail reports err with the first lines of a crashed child's stderr.
	fail := func(c *child, err error) (*IdleSide, *IdleSide, error) {
		printHead(r.stderr, c.stderr.String(), 20)
		return nil, nil, err
	}
	// Two measurements: with the first half of the connections open and
	// with all of them. Per connection is against the process before any
	// connection; marginal is the slope between the two points, which
	// leaves out what the first connections cost once per process (code
	// pages faulted in, the runtime's caches of goroutines and spans).
	half := n / 2
	var sides [2][2]*IdleSide // [point][server, client]
	for i, count := range []int{half, n} {
		if err := r.awaitIdleClient(cli, n); err != nil {
			return fail(cli, err)
		}
		cmd := "measure " + strconv.Itoa(count)
		if err := srv.send(cmd); err != nil {
			return fail(srv, err)
		}
		if err := cli.send(cmd); err != nil {
			return fail(cli, err)
		}
		sm, err := srv.read()
		if err != nil {
			return fail(srv, err)
		}
		cm, err := cli.read()
		if err != nil {
			return fail(cli, err)
		}
		if sm.Side == nil || cm.Side == nil {
			return nil, nil, fmt.Errorf("idle children answered without figures")
		}
		sides[i] = [2]*IdleSide{sm.Side, cm.Side}
		if i == 0 {
			if err := cli.send("more"); err != nil {
				return fail(cli, err)
			}
		}
	}
	for j := range 2 {
		first, last := sides[0][j], sides[1][j]
		if d := float64(n - half); d > 0 {
			last.MarginalRSSBytesPerConn = float64(last.RSSBytes-first.RSSBytes) / d
		}
	}
	return sides[1][0], sides[1][1], nil
}

// awaitIdleClient reads the idle client's messages until it is ready,
// and shows its progress on stderr meanwhile.
func (r *runner) awaitIdleClient(cli *child, n int) error {
	for {
		m, err := cli.read()
		if err != nil {
			return err
		}
		if m.Ready || m.Opened == 0 {
			return nil
		}
		r.progressf("    idle: %d/%d connections open (%.1f s)", m.Opened, n, m.OpenSeconds)
	}
}

// idleChildFlags are the flags both idle children take.
type idleChildFlags struct {
	stack   string
	addr    string
	conns   int
	settle  time.Duration
	timeout time.Duration
	// heapProfile, when set, receives a heap profile of the live objects
	// after each measurement (go tool pprof -sample_index=inuse_space).
	heapProfile string
	memRate     int
	compression string    // the compressor of each connection's RPC
	tls         *benchTLS // nil: plaintext
	// sources is how many loopback source addresses the client spreads
	// its connections over (idle-client; source_addrs.go): 1 or 0 leaves
	// the choice to the kernel.
	sources int
}

func parseIdleChild(name string, args []string, stderr io.Writer) (*idleChildFlags, *impl, error) {
	var f idleChildFlags
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.stack, "stack", stackGrpc, "implementation: leangrpc or grpc-go")
	fs.StringVar(&f.addr, "addr", "", "server address (idle-client)")
	fs.IntVar(&f.conns, "connections", 1, "number of connections")
	fs.DurationVar(&f.settle, "settle", time.Second, "time to let connections go idle before measuring")
	fs.DurationVar(&f.timeout, "timeout", 15*time.Second, "bound on each connection's RPC")
	fs.StringVar(&f.heapProfile, "heapprofile", "", "write a heap profile after each measurement")
	fs.IntVar(&f.memRate, "memprofilerate", 0, "runtime.MemProfileRate (0: leave the default)")
	fs.StringVar(&f.compression, "compression", "", "compressor of each connection's RPC (idle-client)")
	fs.IntVar(&f.sources, "sources", 1, "loopback source addresses to spread the connections over, from 127.0.0.1 on (idle-client)")
	certFile := fs.String("tlscert", "", "TLS certificate file (with -tlskey: TLS, see leanbench -tls)")
	keyFile := fs.String("tlskey", "", "TLS key file")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if err := checkCompression(f.compression); err != nil {
		return nil, nil, err
	}
	var err error
	if f.tls, err = childTLS(*certFile, *keyFile); err != nil {
		return nil, nil, err
	}
	if f.memRate > 0 {
		runtime.MemProfileRate = f.memRate
	}
	im, ok := impls[f.stack]
	if !ok {
		return nil, nil, fmt.Errorf("unknown implementation %q", f.stack)
	}
	if f.conns < 1 {
		return nil, nil, fmt.Errorf("-connections %d", f.conns)
	}
	if f.sources < 0 || f.sources > maxLoopbackSources {
		return nil, nil, fmt.Errorf("-sources %d", f.sources)
	}
	// Each child holds one descriptor per connection.
	if err := checkChildFiles(f.conns); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return &f, im, nil
}

// serveCommands answers "measure N" lines on stdin with the figures
// against base for N connections, and runs more on "more", until stdin
// closes. openTime, when not nil, gives the client's open time so far.
func serveCommands(stdin io.Reader, enc *json.Encoder, base memFigures, f *idleChildFlags, more func(), openTime func() time.Duration) {
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "measure":
			n, err := strconv.Atoi(arg)
			if err != nil || n < 1 {
				n = f.conns
			}
			side := perConn(base, measureMem(f.settle), n)
			if openTime != nil {
				side.OpenSeconds = openTime().Seconds()
			}
			if f.heapProfile != "" {
				writeHeapProfile(f.heapProfile)
			}
			enc.Encode(childMsg{Side: side})
		case "more":
			if more != nil {
				more()
			}
		}
	}
}

// runIdleServer is the server child of the idle workload.
func runIdleServer(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	f, im, err := parseIdleChild(idleServerCmd, args, stderr)
	if err != nil {
		enc.Encode(childMsg{Error: err.Error()})
		return 2
	}
	// Exit on our own if the parent disappears without closing stdin.
	time.AfterFunc(10*time.Minute, func() { os.Exit(3) })
	srv, err := startServer(im, f.tls)
	if err != nil {
		enc.Encode(childMsg{Error: err.Error()})
		return 0
	}
	if im.name != stackGrpc {
		startLeanHelpers()
	}
	base := measureMem(100 * time.Millisecond)
	enc.Encode(childMsg{Addr: srv.addr})
	serveCommands(stdin, enc, base, f, nil, nil)
	if err := srv.stop(); err != nil {
		fmt.Fprintf(stderr, "warning: %v\n", err)
	}
	return 0
}

// runIdleClient is the client child of the idle workload.
func runIdleClient(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	f, im, err := parseIdleChild(idleClientCmd, args, stderr)
	if err != nil {
		enc.Encode(childMsg{Error: err.Error()})
		return 2
	}
	time.AfterFunc(10*time.Minute, func() { os.Exit(3) })
	if im.name != stackGrpc {
		startLeanHelpers()
	}
	base := measureMem(100 * time.Millisecond)
	// The first half now, the rest on "more" (see measureIdle).
	half := f.conns / 2
	var closers []func() error
	defer func() {
		if !within(15*time.Second, func() {
			for _, c := range closers {
				c()
			}
		}) {
			fmt.Fprintf(stderr, "warning: %s client: closing idle connections did not finish within 15s\n", im.name)
		}
	}()
	d := &idleDialer{im: im, addr: f.addr, rpcTimeout: f.timeout, sec: f.tls,
		callOpts: compressionOptions(f.compression), netDial: spreadDialer(loopbackSources(f.sources))}
	var progress openProgress
	dial := func(n int) bool {
		var cs []func() error
		var err error
		progress.phase(enc, &d.opened, func() {
			cs, err = d.open(context.Background(), n)
		})
		closers = append(closers, cs...)
		if err != nil {
			enc.Encode(childMsg{Error: err.Error()})
			return false
		}
		enc.Encode(childMsg{Ready: true})
		return true
	}
	if !dial(half) {
		return 0
	}
	serveCommands(stdin, enc, base, f, func() { dial(f.conns - half) }, func() time.Duration { return progress.spent })
	return 0
}

// openProgress is the idle client's time spent opening connections, and
// its progress reports while it does: a parent waiting for 19,000
// connections would otherwise see nothing for a minute.
type openProgress struct {
	spent time.Duration // the time of the finished phases
}

// phase runs open, one phase of opening, and meanwhile sends on enc once
// a second the count of open connections (from opened) and the time spent
// so far: nothing when the phase takes less than a second, nor while none
// is open, since a message with opened 0 would read as "ready". Nothing
// else writes to enc until open returns.
func (p *openProgress) phase(enc *json.Encoder, opened *atomic.Int64, open func()) {
	start := time.Now()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if n := opened.Load(); n > 0 {
					enc.Encode(childMsg{Opened: int(n), OpenSeconds: (p.spent + time.Since(start)).Seconds()})
				}
			}
		}
	}()
	open()
	close(stop)
	<-stopped
	p.spent += time.Since(start)
}

// idleDialer opens the idle client's connections.
type idleDialer struct {
	im         *impl
	addr       string
	rpcTimeout time.Duration // bound on each connection's RPC
	sec        *benchTLS     // nil: plaintext
	callOpts   []grpc.CallOption
	netDial    netDialer    // nil: the stack's own
	opened     atomic.Int64 // connections that made their RPC, over all calls of open
}

// open opens n connections to d.addr (over TLS when d.sec is not nil) and
// makes one unary RPC on each with d.callOpts, each bounded by
// d.rpcTimeout. It returns the close functions of the connections it
// opened, also on error.
func (d *idleDialer) open(ctx context.Context, n int) ([]func() error, error) {
	im, addr, sec := d.im, d.addr, d.sec
	closers := make([]func() error, n)
	var firstErr errBox
	var wg sync.WaitGroup
	next := make(chan int)
	req := &testpb.SimpleRequest{ResponseSize: 1, Payload: &testpb.Payload{Body: zeroBody(1)}}
	for range idleDialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if firstErr.get() != nil {
					continue
				}
				err := func() (err error) {
					defer func() {
						if p := recover(); p != nil {
							err = fmt.Errorf("%s client panicked: %v", im.name, p)
						}
					}()
					cc, closeFn, err := dialSafe(im, addr, sec, d.netDial)
					if err != nil {
						return err
					}
					closers[i] = closeFn
					rctx, cancel := context.WithTimeout(ctx, d.rpcTimeout)
					defer cancel()
					var p peer.Peer
					opts := append(d.callOpts[:len(d.callOpts):len(d.callOpts)], grpc.Peer(&p))
					if _, err := testpb.NewBenchmarkServiceClient(cc).UnaryCall(rctx, req, opts...); err != nil {
						return fmt.Errorf("connection %d: UnaryCall: %w", i, err)
					}
					if err := checkPeerSecurity(&p, sec); err != nil {
						return fmt.Errorf("connection %d: %w", i, err)
					}
					d.opened.Add(1)
					return nil
				}()
				if err != nil {
					firstErr.set(err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	var out []func() error
	for _, c := range closers {
		if c != nil {
			out = append(out, c)
		}
	}
	return out, firstErr.get()
}

// writeHeapProfile writes the live heap to file; a failure only costs the
// profile.
func writeHeapProfile(file string) {
	fh, err := os.Create(file)
	if err != nil {
		return
	}
	defer fh.Close()
	pprof.Lookup("heap").WriteTo(fh, 0)
}
