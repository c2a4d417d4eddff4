package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const oldJSON = `{"env": {"go": "go1.26.0", "goos": "linux", "goarch": "amd64", "cpus": 2, "grpcGo": "v1.85.0", "leangrpc": "aaa", "time": "2026-01-01T00:00:00Z"},
 "results": [
  {"stack": "grpc-go", "workload": "unary", "reqSize": 100, "respSize": 100, "concurrency": 120, "connections": 1, "round": 1,
   "seconds": 2, "ops": 2000, "opsPerSec": 1000, "allocsPerOp": 100, "bytesPerOp": 5000, "cpuMicrosPerOp": 50,
   "latencyMicros": {"p50": 100, "p90": 200, "p99": 400, "max": 800}},
  {"stack": "grpc-go", "workload": "unary", "reqSize": 100, "respSize": 100, "concurrency": 120, "connections": 1, "round": 2,
   "seconds": 2, "ops": 2400, "opsPerSec": 1200, "allocsPerOp": 100, "bytesPerOp": 5000, "cpuMicrosPerOp": 40,
   "latencyMicros": {"p50": 80, "p90": 200, "p99": 400, "max": 800}},
  {"stack": "leangrpc", "workload": "unary", "reqSize": 100, "respSize": 100, "concurrency": 120, "connections": 1, "round": 1,
   "error": "leangrpc: not implemented yet"},
  {"stack": "grpc-go", "workload": "idle", "connections": 1000, "round": 1,
   "server": {"rssBytesPerConn": 40000, "heapBytesPerConn": 20000, "stackBytesPerConn": 12000, "goroutinesPerConn": 3},
   "client": {"rssBytesPerConn": 30000, "heapBytesPerConn": 15000, "stackBytesPerConn": 20000, "goroutinesPerConn": 5}},
  {"stack": "grpc-go", "workload": "streaming", "reqSize": 100, "respSize": 100, "concurrency": 1, "connections": 1, "round": 1,
   "seconds": 2, "ops": 10, "opsPerSec": 5, "allocsPerOp": 1, "bytesPerOp": 1, "cpuMicrosPerOp": 1,
   "latencyMicros": {"p50": 1, "p90": 1, "p99": 1, "max": 1}}
 ]}`

const newJSON = `{"env": {"go": "go1.26.8", "goos": "linux", "goarch": "amd64", "cpus": 2, "grpcGo": "v1.85.0", "leangrpc": "bbb", "time": "2026-01-02T00:00:00Z"},
 "results": [
  {"stack": "grpc-go", "workload": "unary", "reqSize": 100, "respSize": 100, "concurrency": 120, "connections": 1, "round": 1,
   "seconds": 2, "ops": 3300, "opsPerSec": 1650, "allocsPerOp": 50, "bytesPerOp": 5000, "cpuMicrosPerOp": 45,
   "latencyMicros": {"p50": 90, "p90": 200, "p99": 400, "max": 800}},
  {"stack": "leangrpc", "workload": "unary", "reqSize": 100, "respSize": 100, "concurrency": 120, "connections": 1, "round": 1,
   "seconds": 2, "ops": 4000, "opsPerSec": 2000, "allocsPerOp": 10, "bytesPerOp": 1000, "cpuMicrosPerOp": 20,
   "latencyMicros": {"p50": 50, "p90": 60, "p99": 70, "max": 80}},
  {"stack": "grpc-go", "workload": "idle", "connections": 1000, "round": 1,
   "server": {"rssBytesPerConn": 30000, "heapBytesPerConn": 20000, "stackBytesPerConn": 12000, "goroutinesPerConn": 3},
   "client": {"rssBytesPerConn": 30000, "heapBytesPerConn": 15000, "stackBytesPerConn": 20000, "goroutinesPerConn": 5}},
  {"stack": "leangrpc", "workload": "idle", "connections": 1000, "round": 1,
   "server": {"rssBytesPerConn": 10000, "heapBytesPerConn": 5000, "stackBytesPerConn": 0, "goroutinesPerConn": 1},
   "client": {"rssBytesPerConn": 10000, "heapBytesPerConn": 5000, "stackBytesPerConn": 0, "goroutinesPerConn": 1}}
 ]}`

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// row returns the whitespace-separated fields of the first line of out,
// after the line starting with header, whose first fields equal title.
func row(t *testing.T, out, header string, title ...string) []string {
	t.Helper()
	i := strings.Index(out, header)
	if i < 0 {
		t.Fatalf("no %q in output:\n%s", header, out)
	}
	for _, l := range strings.Split(out[i:], "\n") {
		f := strings.Fields(l)
		if len(f) >= len(title) && strings.Join(f[:len(title)], " ") == strings.Join(title, " ") {
			return f[len(title):]
		}
	}
	t.Fatalf("no row %q after %q in output:\n%s", title, header, out)
	return nil
}

func TestCompare(t *testing.T) {
	oldP, newP := writeTemp(t, "old.json", oldJSON), writeTemp(t, "new.json", newJSON)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"compare", oldP, newP}, &stdout, &stderr); code != 0 {
		t.Fatalf("compare exit %d, stderr:\n%s", code, stderr.String())
	}
	out := stdout.String()

	// Old grpc-go unary is the median of two rounds: 1100 ops/s, 45 µs.
	unary := "grpc-go  unary 100B/100B calls=120 conns=1"
	if got := row(t, out, unary, "ops/s"); strings.Join(got, " ") != "1100.0 1650.0 +50.00%" {
		t.Errorf("ops/s row = %q", got)
	}
	if got := row(t, out, unary, "CPU", "µs/op"); strings.Join(got, " ") != "45.00 45.00 +0.00%" {
		t.Errorf("CPU row = %q", got)
	}
	if got := row(t, out, unary, "allocs/op"); strings.Join(got, " ") != "100.00 50.00 -50.00%" {
		t.Errorf("allocs row = %q", got)
	}
	if got := row(t, out, unary, "p50", "µs"); strings.Join(got, " ") != "90.0 90.0 +0.00%" {
		t.Errorf("p50 row = %q", got)
	}
	if got := row(t, out, unary, "rounds"); strings.Join(got, " ") != "2 1" {
		t.Errorf("rounds row = %q", got)
	}
	// leangrpc failed before and works after.
	if got := row(t, out, "leangrpc  unary 100B/100B calls=120 conns=1", "status"); got[0] != "error:" || got[len(got)-1] != "ok" {
		t.Errorf("leangrpc status row = %q", got)
	}
	idle := "grpc-go  idle conns=1000"
	if got := row(t, out, idle, "server", "RSS", "B/conn"); strings.Join(got, " ") != "40000 30000 -25.00%" {
		t.Errorf("idle server RSS row = %q", got)
	}
	if got := row(t, out, idle, "client", "goroutines/conn"); strings.Join(got, " ") != "5.00 5.00 +0.00%" {
		t.Errorf("idle client goroutines row = %q", got)
	}
	for _, want := range []string{
		"only in OLD: grpc-go  streaming 100B/100B calls=1 conns=1",
		"only in NEW: leangrpc  idle conns=1000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := row(t, out, "Before", "leangrpc"); strings.Join(got, " ") != "aaa bbb" {
		t.Errorf("env row = %q", got)
	}
}

func TestCompareErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"compare", "only-one.json"}, &stdout, &stderr); code != 2 {
		t.Errorf("one argument: exit %d, want 2", code)
	}
	bad := writeTemp(t, "bad.json", "{not json")
	if code := run([]string{"compare", bad, bad}, &stdout, &stderr); code != 1 {
		t.Errorf("bad JSON: exit %d, want 1", code)
	}
	if code := run([]string{"compare", filepath.Join(t.TempDir(), "missing.json"), bad}, &stdout, &stderr); code != 1 {
		t.Errorf("missing file: exit %d, want 1", code)
	}
}

func TestPercentChange(t *testing.T) {
	for _, tc := range []struct {
		a, b float64
		want string
	}{
		{100, 150, "+50.00%"},
		{100, 50, "-50.00%"},
		{0, 0, "0.00%"},
		{0, 5, "n/a"},
	} {
		if got := percentChange(tc.a, tc.b); got != tc.want {
			t.Errorf("percentChange(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

// oldTLSJSON is a -tls file from before results carried "tls": only
// env.security says that its runs were over TLS.
const oldTLSJSON = `{"env": {"go": "go1.26.0", "cpus": 2, "grpcGo": "v1.85.0", "leangrpc": "aaa", "time": "2026-01-01T00:00:00Z",
  "security": "TLS 1.3, ECDSA P-256"},
 "results": [
  {"stack": "grpc-go", "workload": "idle", "connections": 2000, "round": 1,
   "server": {"rssBytesPerConn": 50000, "goroutinesPerConn": 3}, "client": {"rssBytesPerConn": 40000, "goroutinesPerConn": 5}}
 ]}`

// quickJSON has the quick suite's two idle rows, plaintext and TLS.
const quickJSON = `{"env": {"go": "go1.26.8", "cpus": 2, "grpcGo": "v1.85.0", "leangrpc": "bbb", "time": "2026-01-02T00:00:00Z",
  "security": "plaintext (tls rows: TLS 1.3, ECDSA P-256)"},
 "results": [
  {"stack": "grpc-go", "workload": "idle", "connections": 2000, "round": 1,
   "server": {"rssBytesPerConn": 30000, "goroutinesPerConn": 3}, "client": {"rssBytesPerConn": 20000, "goroutinesPerConn": 5}},
  {"stack": "grpc-go", "workload": "idle", "connections": 2000, "tls": true, "round": 1,
   "server": {"rssBytesPerConn": 45000, "goroutinesPerConn": 3}, "client": {"rssBytesPerConn": 40000, "goroutinesPerConn": 5}}
 ]}`

// TestCompareTLSRows: compare matches a TLS row with the TLS row of the
// other file, also with a -tls file from before results carried "tls",
// and never with the plaintext row of the same shape.
func TestCompareTLSRows(t *testing.T) {
	for _, tc := range []struct {
		name, old string
	}{
		{"same format", quickJSON},
		{"old -tls file", oldTLSJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oldP, newP := writeTemp(t, "old.json", tc.old), writeTemp(t, "new.json", quickJSON)
			var stdout, stderr bytes.Buffer
			if code := run([]string{"compare", oldP, newP}, &stdout, &stderr); code != 0 {
				t.Fatalf("compare exit %d, stderr:\n%s", code, stderr.String())
			}
			out := stdout.String()
			want := "50000 45000 -10.00%"
			if tc.old == quickJSON {
				want = "45000 45000 +0.00%"
			}
			if got := row(t, out, "grpc-go  idle conns=2000 tls\n", "server", "RSS", "B/conn"); strings.Join(got, " ") != want {
				t.Errorf("TLS idle server RSS row = %q, want %q\n%s", got, want, out)
			}
			if tc.old == quickJSON {
				if got := row(t, out, "grpc-go  idle conns=2000\n", "server", "RSS", "B/conn"); strings.Join(got, " ") != "30000 30000 +0.00%" {
					t.Errorf("plaintext idle server RSS row = %q\n%s", got, out)
				}
				return
			}
			// The old file had no plaintext row.
			if !strings.Contains(out, "only in NEW: grpc-go  idle conns=2000\n") {
				t.Errorf("the plaintext row is not new-only:\n%s", out)
			}
			if strings.Contains(out, "only in OLD") {
				t.Errorf("the old TLS row matched nothing:\n%s", out)
			}
		})
	}
}
