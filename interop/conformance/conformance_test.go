//go:build unix

// Package conformance runs the Connect conformance suite
// (connectrpc.com/conformance) against leangrpc's server: the suite's
// runner, connectconformance, starts the server under test (./server)
// once per configuration it needs, sends it the suite's cases through its
// reference clients (connect-go's, and grpc-go's for gRPC) over gRPC,
// gRPC-Web and the Connect protocol, and checks every response. It runs
// twice: on leangrpc's own listener (Server.Serve) and with the Server
// mounted in net/http (Server.ServeHTTP).
//
// config.yaml says what leangrpc supports; known-failing.txt lists the
// cases known to fail, each with its reason, which must fail;
// known-flaky.txt those that may fail by timing alone. Run one case by
// hand, with the HTTP exchange traced:
//
//	go build -o /tmp/cf/ ./server connectrpc.com/conformance/cmd/connectconformance
//	/tmp/cf/connectconformance --mode server --conf config.yaml --trace -v \
//	    --run 'Timeouts/HTTPVersion:1/**' -- /tmp/cf/server -mode own
package conformance

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runTimeout bounds one run of the suite: about ten seconds on two
// cores, since the runner sends its cases in parallel and the servers
// start four at a time.
const runTimeout = 5 * time.Minute

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite runs 3820 cases per mode")
	}
	bin := t.TempDir()
	build(t, bin)
	for _, mode := range []string{"own", "servehttp"} {
		t.Run(mode, func(t *testing.T) {
			runSuite(t, bin, mode)
		})
	}
}

// build builds the server under test and the runner (at the version
// go.mod requires) into dir.
func build(t *testing.T, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"./server", "connectrpc.com/conformance/cmd/connectconformance")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built the server and connectconformance in %v", time.Since(start).Round(time.Millisecond))
}

// summaryLine matches the runner's closing lines: "Total cases: N",
// "N passed, M failed" and the count of known failures.
var summaryLine = regexp.MustCompile(`^(Total cases: \d+|\d+ passed, \d+ failed|\(Another \d+ failed as expected.*\))$`)

func runSuite(t *testing.T, bin, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "connectconformance"),
		"--mode", "server",
		"--conf", "config.yaml",
		"--known-failing", "@known-failing.txt",
		"--known-flaky", "@known-flaky.txt",
		"--",
		filepath.Join(bin, "server"), "-mode", mode)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The runner starts the servers under test and handles no signal: on
	// the timeout its whole process group goes, servers too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start).Round(time.Millisecond)
	var summary []string
	for _, line := range strings.Split(out.String(), "\n") {
		if summaryLine.MatchString(strings.TrimSpace(line)) {
			summary = append(summary, strings.TrimSpace(line))
		}
	}
	t.Logf("mode %s, %v: %s", mode, elapsed, strings.Join(summary, "; "))
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the suite did not finish in %v:\n%s", runTimeout, out.String())
	case err != nil:
		t.Fatalf("connectconformance: %v\n%s", err, out.String())
	case len(summary) == 0:
		t.Fatalf("connectconformance printed no summary:\n%s", out.String())
	}
}
