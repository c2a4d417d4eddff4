package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
)

// blackhole is a server implementation that accepts connections and never
// answers, standing in for a stack that hangs. It is registered in the test
// binary only (also in its idle-server child).
type blackhole struct {
	mu    sync.Mutex
	lis   net.Listener
	conns []net.Conn
}

func (b *blackhole) RegisterService(*grpc.ServiceDesc, any) {}

func (b *blackhole) Serve(lis net.Listener) error {
	b.mu.Lock()
	b.lis = lis
	b.mu.Unlock()
	for {
		c, err := lis.Accept()
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.conns = append(b.conns, c)
		b.mu.Unlock()
	}
}

func (b *blackhole) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lis != nil {
		b.lis.Close()
	}
	for _, c := range b.conns {
		c.Close()
	}
}

func init() {
	impls["blackhole"] = &impl{
		name:      "blackhole",
		newServer: func(*benchTLS) grpcServer { return new(blackhole) },
		dial:      impls[stackGrpc].dial,
	}
}

// TestHangingStackGetsErrorRows checks that a stack that never answers
// costs a bounded time and ends as error rows, not a stuck benchmark.
func TestHangingStackGetsErrorRows(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for timeouts")
	}
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	args := []string{
		"-workloads", "unary,streaming,idle", "-maxConcurrentCalls", "2", "-connections", "3",
		"-benchtime", "100ms", "-warmup", "0", "-rounds", "2", "-settle", "0", "-timeout", "400ms",
		"-stacks", "grpc-go>blackhole", "-json", jsonPath,
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, stderr.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	// One failed round per workload: the second round is skipped.
	if len(f.Results) != 3 {
		t.Fatalf("%d results, want 3: %+v", len(f.Results), f.Results)
	}
	for _, r := range f.Results {
		if r.Error == "" || r.Figures != nil || r.Server != nil {
			t.Errorf("%s: want an error and no figures, got %+v", r.Workload, r)
		}
	}
	if !strings.Contains(f.Results[0].Error, "did not finish within") {
		t.Errorf("unary error = %q, want a timeout", f.Results[0].Error)
	}
	if !strings.Contains(stdout.String(), "error[1]") || !strings.Contains(stdout.String(), "grpc-go>blackhole (first in unary") {
		t.Errorf("table lacks the error cell or its footnote:\n%s", stdout.String())
	}
}
