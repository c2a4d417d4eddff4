package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leangrpc/leangrpc"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// loadExtras are the diagnostic additions to a load run.
type loadExtras struct {
	strace     bool   // count the server's syscalls over the measured window
	cpuProfile string // leangrpc only: the server writes a CPU profile here
}

// runResult is one server's load run.
type runResult struct {
	server    string
	round     int  // 0 for a diagnostic run outside the table
	streaming bool // the streaming shape: requests are messages
	reqPerSec float64
	requests  int64
	cpu       time.Duration
	clientCPU time.Duration // h2load's, over the same window
	ctxsw     int64
	syscalls  []syscallCount // under strace only, most frequent first
	err       error
}

// cpuPerRequest is the server's CPU time per request, in microseconds.
func (r runResult) cpuPerRequest() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.cpu.Microseconds()) / float64(r.requests)
}

// clientCPUPerRequest is h2load's CPU time per request, in microseconds:
// the client's cost depends on how the server batches its writes.
func (r runResult) clientCPUPerRequest() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.clientCPU.Microseconds()) / float64(r.requests)
}

func (r runResult) switchesPerRequest() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.ctxsw) / float64(r.requests)
}

func (r runResult) line() string {
	if r.streaming {
		if r.err != nil {
			return fmt.Sprintf("round %d %-8s streaming FAILED: %v", r.round, r.server, r.err)
		}
		return fmt.Sprintf("round %d %-8s streaming %9.0f msg/s %6.1f CPU-µs/msg %5.2f ctx-switches/msg, client %5.1f CPU-µs/msg (%d messages)",
			r.round, r.server, r.reqPerSec, r.cpuPerRequest(), r.switchesPerRequest(), r.clientCPUPerRequest(), r.requests)
	}
	if r.err != nil {
		return fmt.Sprintf("round %d %-8s FAILED: %v", r.round, r.server, r.err)
	}
	return fmt.Sprintf("round %d %-8s %9.0f req/s %6.1f CPU-µs/req %5.2f ctx-switches/req, h2load %5.1f CPU-µs/req (%d requests)",
		r.round, r.server, r.reqPerSec, r.cpuPerRequest(), r.switchesPerRequest(), r.clientCPUPerRequest(), r.requests)
}

// measureLoad runs one server process through warm-up and the measured
// window.
func measureLoad(ctx context.Context, o options, name, bin, body string, round int, x loadExtras) runResult {
	r := runResult{server: name, round: round}
	var args []string
	if x.cpuProfile != "" {
		args = append(args, "-cpuprofile", x.cpuProfile)
	}
	srv, err := startLoadServer(ctx, o, name, bin, args...)
	if err != nil {
		r.err = err
		return r
	}
	r.err = measureStarted(ctx, o, srv, body, x, &r)
	if err := srv.stop(); r.err == nil {
		r.err = err
	}
	return r
}

// startLoadServer starts the named server for h2load's runs; args go to
// the gRPC servers.
func startLoadServer(ctx context.Context, o options, name, bin string, args ...string) (*serverProc, error) {
	if name == serverNghttpd {
		return startNghttpd(ctx, o, bin)
	}
	return startServer(ctx, name, bin, args...)
}

// verifyAnswer checks, before a server is measured, that it answers
// h2load's request as it should.
func verifyAnswer(ctx context.Context, o options, srv *serverProc) error {
	if srv.name == serverNghttpd {
		return verifyStaticAnswer(ctx, srv.addr, o.payload)
	}
	return verifyUnary(ctx, srv.addr, o.payload)
}

func measureStarted(ctx context.Context, o options, srv *serverProc, body string, x loadExtras, r *runResult) error {
	if err := verifyAnswer(ctx, o, srv); err != nil {
		return err
	}
	if o.warmup > 0 {
		if _, err := runH2load(ctx, o, srv.addr, body, o.warmup); err != nil {
			return fmt.Errorf("warm-up: %v", err)
		}
	}
	var st *straceRun
	if x.strace {
		var err error
		if st, err = startStrace(ctx, srv.pid()); err != nil {
			return err
		}
	}
	before, err := sampleProc(srv.pid())
	if err != nil {
		return err
	}
	h, err := runH2load(ctx, o, srv.addr, body, o.duration)
	if err != nil {
		if st != nil {
			st.stop()
		}
		return err
	}
	after, err := sampleProc(srv.pid())
	if err != nil {
		return err
	}
	if st != nil {
		if r.syscalls, err = st.stop(); err != nil {
			return err
		}
	}
	r.reqPerSec, r.requests, r.clientCPU = h.reqPerSec, h.done, h.cpu
	r.cpu, r.ctxsw = after.cpu-before.cpu, after.ctxsw-before.ctxsw
	return h.check(unaryResponseFrameLen(o.payload), int64(o.clients)*int64(o.streams))
}

// verifyUnary makes the benchmark's call once through a gRPC client, so a
// server that answers h2load's request with anything but the expected
// message fails before it is measured.
func verifyUnary(ctx context.Context, addr string, payload int) error {
	cc, err := leangrpc.NewClient(addr, leangrpc.WithInsecure())
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := testpb.NewTestServiceClient(cc).UnaryCall(ctx, unaryRequest(payload))
	if err != nil {
		return fmt.Errorf("check call: %v", err)
	}
	if got := len(resp.GetPayload().GetBody()); got != payload {
		return fmt.Errorf("check call: response payload of %d bytes, want %d", got, payload)
	}
	return nil
}

// straceRun is strace -c attached to a server.
type straceRun struct {
	cmd *exec.Cmd
	out string
}

func startStrace(ctx context.Context, pid int) (*straceRun, error) {
	f, err := os.CreateTemp("", "strace-*.txt")
	if err != nil {
		return nil, err
	}
	f.Close()
	cmd := exec.Command("strace", "-c", "-f", "-p", strconv.Itoa(pid), "-o", f.Name())
	if err := cmd.Start(); err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("strace: %v", err)
	}
	// strace reports nothing until it has attached to every thread; give
	// it a moment before the measured window starts.
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
	}
	return &straceRun{cmd: cmd, out: f.Name()}, nil
}

// stop detaches strace and returns its counts.
func (s *straceRun) stop() ([]syscallCount, error) {
	defer os.Remove(s.out)
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	if err := s.cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return nil, fmt.Errorf("strace: %v", err)
		}
	}
	b, err := os.ReadFile(filepath.Clean(s.out))
	if err != nil {
		return nil, err
	}
	return parseStraceSummary(string(b))
}

// syscallCount is one row of strace -c's summary.
type syscallCount struct {
	name  string
	calls int64
}

// parseStraceSummary reads the table strace -c writes: rows of
// "% time, seconds, usecs/call, calls, [errors,] syscall", then a total.
func parseStraceSummary(s string) ([]syscallCount, error) {
	var out []syscallCount
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || len(f) > 6 || f[len(f)-1] == "total" {
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil {
			continue // the header or a rule
		}
		calls, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, syscallCount{name: f[len(f)-1], calls: calls})
	}
	if len(out) == 0 {
		return nil, errors.New("strace -c reported no syscalls")
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].calls > out[j].calls })
	return out, nil
}
