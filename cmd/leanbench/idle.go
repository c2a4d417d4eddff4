package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// The idle workload opens N connections, makes one RPC on each and then
// leaves them idle. The server runs in a child process (leanbench
// re-executes itself with the hidden subcommand idle-server) so that each
// side's memory can be measured on its own. The parent is the client.
//
// Protocol between parent and child, one JSON object per line on the
// child's stdout:
//   child:  {"addr": "127.0.0.1:port"}   baseline taken, serving
//   parent: "measure\n" on the child's stdin, once all RPCs are done
//   child:  {"side": {...}}               after settling and GC
//   parent: closes stdin; the child stops its server and exits.
// On failure the child writes {"error": "..."} and exits.

const (
	idleServerCmd = "idle-server"
	childEnv      = "LEANBENCH_CHILD" // set in the child's environment
	idleDialers   = 16                // connections opened in parallel
)

type childMsg struct {
	Addr  string    `json:"addr,omitempty"`
	Side  *IdleSide `json:"side,omitempty"`
	Error string    `json:"error,omitempty"`
}

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
		BaselineRSSBytes:   base.rss,
		BaselineGoroutines: base.goroutines,
	}
}

// checkFileLimit raises RLIMIT_NOFILE and says on stderr when it is still
// below what n connections need.
func checkFileLimit(w io.Writer, n int) {
	need := uint64(n) + 64
	cur, max, err := raiseFileLimit()
	if err != nil {
		fmt.Fprintf(w, "leanbench: cannot read RLIMIT_NOFILE (%v); %d connections need about %d descriptors\n", err, n, need)
		return
	}
	if cur < need {
		fmt.Fprintf(w, "leanbench: RLIMIT_NOFILE is %d (hard limit %d), below the ~%d that %d connections need; raise it with ulimit -n\n", cur, max, need, n)
	}
}

// runIdle runs the idle workload once for one stack.
func (r *runner) runIdle(st stack, cfg config, round int) Result {
	res := Result{Stack: st.name, Workload: workloadIdle, Connections: cfg.connections, Round: round}
	srvSide, cliSide, err := r.measureIdle(st, cfg.connections)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Server, res.Client = srvSide, cliSide
	return res
}

func (r *runner) measureIdle(st stack, n int) (srvSide, cliSide *IdleSide, err error) {
	checkFileLimit(r.stderr, n)
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("finding own executable: %w", err)
	}
	// Bound the whole workload: dialing, settling twice, and teardown.
	limit := 4*r.opts.timeout + time.Duration(n)*5*time.Millisecond + 2*r.opts.settle
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()

	cmd := exec.CommandContext(ctx, exe, idleServerCmd, "-stack", st.server.name, "-settle", r.opts.settle.String(), "-connections", strconv.Itoa(n))
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = r.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting server child: %w", err)
	}
	defer func() {
		stdin.Close()
		waited := within(10*time.Second, func() { cmd.Wait() })
		if !waited {
			cmd.Process.Kill()
			r.progressf("warning: idle server child did not exit; killed")
		}
	}()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	readMsg := func() (childMsg, error) {
		var m childMsg
		if !lines.Scan() {
			if err := lines.Err(); err != nil {
				return m, fmt.Errorf("server child: %w", err)
			}
			if ctx.Err() != nil {
				return m, fmt.Errorf("server child: timed out after %v", limit)
			}
			return m, errors.New("server child exited early")
		}
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			return m, fmt.Errorf("server child said %q: %w", lines.Text(), err)
		}
		if m.Error != "" {
			return m, errors.New(m.Error)
		}
		return m, nil
	}
	hello, err := readMsg()
	if err != nil {
		return nil, nil, err
	}

	base := measureMem(100 * time.Millisecond)
	closers, err := dialIdle(ctx, st, hello.Addr, n, r.opts.timeout)
	defer func() {
		ok := within(15*time.Second, func() {
			for _, c := range closers {
				c()
			}
		})
		if !ok {
			r.progressf("warning: %s client: closing idle connections did not finish within 15s", st.client.name)
		}
	}()
	if err != nil {
		return nil, nil, err
	}

	if _, err := io.WriteString(stdin, "measure\n"); err != nil {
		return nil, nil, fmt.Errorf("server child: %w", err)
	}
	now := measureMem(r.opts.settle)
	cliSide = perConn(base, now, n)
	m, err := readMsg()
	if err != nil {
		return nil, nil, err
	}
	if m.Side == nil {
		return nil, nil, fmt.Errorf("server child: no figures in %q", lines.Text())
	}
	return m.Side, cliSide, nil
}

// dialIdle opens n connections to addr and makes one unary RPC on each. It
// returns the close functions of the connections it opened, also on error.
// Each RPC is bounded by rpcTimeout.
func dialIdle(ctx context.Context, st stack, addr string, n int, rpcTimeout time.Duration) ([]func() error, error) {
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
							err = fmt.Errorf("%s client panicked: %v", st.client.name, p)
						}
					}()
					cc, closeFn, err := dialSafe(st.client, addr)
					if err != nil {
						return err
					}
					closers[i] = closeFn
					rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
					defer cancel()
					if _, err := testpb.NewBenchmarkServiceClient(cc).UnaryCall(rctx, req); err != nil {
						return fmt.Errorf("connection %d: UnaryCall: %w", i, err)
					}
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

// runIdleServer is the child side of the idle workload.
func runIdleServer(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(idleServerCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	stackName := fs.String("stack", stackGrpc, "server implementation: leangrpc or grpc-go")
	settle := fs.Duration("settle", time.Second, "time to let connections go idle before measuring")
	conns := fs.Int("connections", 1, "number of connections the parent opens")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *conns < 1 {
		*conns = 1
	}
	enc := json.NewEncoder(stdout)
	say := func(m childMsg) { enc.Encode(m) }
	im, ok := impls[*stackName]
	if !ok {
		say(childMsg{Error: fmt.Sprintf("unknown server implementation %q", *stackName)})
		return 2
	}
	raiseFileLimit()
	// Exit on our own if the parent disappears without closing stdin.
	time.AfterFunc(10*time.Minute, func() { os.Exit(3) })

	srv, err := startServer(im)
	if err != nil {
		say(childMsg{Error: err.Error()})
		return 0
	}
	base := measureMem(100 * time.Millisecond)
	say(childMsg{Addr: srv.addr})
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		if in.Text() != "measure" {
			continue
		}
		say(childMsg{Side: perConn(base, measureMem(*settle), *conns)})
	}
	srv.stop()
	return 0
}
