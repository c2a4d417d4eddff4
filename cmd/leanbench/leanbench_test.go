package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRunSmall runs every workload briefly for both stacks in-process and
// checks the table and the JSON document; it checks shape, not speed.
// leangrpc may fail while it is being written: then its cells must say so.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for a few seconds")
	}
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	args := []string{
		"-workloads", "unary,streaming,idle",
		"-reqSizeBytes", "100", "-respSizeBytes", "100,100000",
		"-maxConcurrentCalls", "3", "-connections", "20",
		"-benchtime", "300ms", "-warmup", "50ms", "-rounds", "1", "-settle", "200ms",
		"-stacks", "grpc-go,leangrpc", "-json", jsonPath,
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	t.Logf("stdout:\n%s", out)

	// Progress names every run.
	for _, want := range []string{"[1/10", "grpc-go", "unary 100B/100B calls=3 conns=20, round 1/1", "idle conns=20", "done in"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}

	// Table: the stack group headers, then one row per config whose
	// grpc-go cells are numbers.
	for _, want := range []string{"grpc-go", "leangrpc", "ops/s", "CPU µs/op", "allocs/op", "p50", "MB/s", "srv RSS/conn", "cli gor/conn"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	stacks := []string{"grpc-go", "leangrpc"}
	for _, cfg := range [][]string{
		{"unary", "100B/100B", "3", "20"},
		{"unary", "100B/100kB", "3", "20"},
		{"streaming", "100B/100B", "3", "20"},
		{"streaming", "100B/100kB", "3", "20"},
	} {
		f := row(t, out, "workload", cfg...)
		if ops, err := strconv.ParseFloat(f[0], 64); err != nil || ops <= 0 {
			t.Errorf("%v: grpc-go ops/s cell %q, want a positive number", cfg, f[0])
		}
		checkStackCell(t, out, cfg, f[7:], "leangrpc") // 7 columns per stack with MB/s
	}
	f := row(t, out, "srv RSS/conn", "idle", "20")
	// Per stack: srv RSS/conn, srv marginal, srv heap/conn, srv stack/conn,
	// srv gor/conn, cli RSS/conn, cli marginal, cli gor/conn, open.
	if g, err := strconv.ParseFloat(f[4], 64); err != nil || g <= 0 {
		t.Errorf("idle: grpc-go server goroutines/conn %q, want a positive number", f[4])
	}
	if m, err := strconv.ParseFloat(f[6], 64); err != nil || m <= 0 {
		t.Errorf("idle: grpc-go client marginal RSS/conn %q, want a positive number", f[6])
	}
	if d := f[8]; !strings.HasSuffix(d, "s") || d == "-" {
		t.Errorf("idle: grpc-go open time %q, want a duration", d)
	}
	checkStackCell(t, out, []string{"idle"}, f[9:], "leangrpc")

	// JSON: exact field names, one result per stack and config.
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Env     map[string]any   `json:"env"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"go", "goos", "goarch", "cpus", "grpcGo", "leangrpc", "time"} {
		if _, ok := doc.Env[k]; !ok {
			t.Errorf("env lacks %q: %v", k, doc.Env)
		}
	}
	if doc.Env["grpcGo"] != "v1.85.0" {
		t.Errorf("env.grpcGo = %v, want v1.85.0", doc.Env["grpcGo"])
	}
	if len(doc.Results) != 10 {
		t.Fatalf("%d results, want 10 (5 configs x 2 stacks)", len(doc.Results))
	}
	seen := map[string]bool{}
	for _, r := range doc.Results {
		stack, workload := r["stack"].(string), r["workload"].(string)
		seen[stack+" "+workload] = true
		for _, k := range []string{"connections", "round"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%s %s: lacks %q", stack, workload, k)
			}
		}
		if e, _ := r["error"].(string); e != "" {
			if stack == "grpc-go" {
				t.Errorf("grpc-go %s failed: %s", workload, e)
			}
			continue
		}
		if workload == "idle" {
			for _, side := range []string{"server", "client"} {
				s, ok := r[side].(map[string]any)
				if !ok {
					t.Errorf("%s idle: lacks %q", stack, side)
					continue
				}
				for _, k := range []string{"rssBytesPerConn", "marginalRssBytesPerConn", "rssBytes", "heapBytesPerConn", "stackBytesPerConn", "goroutinesPerConn"} {
					if _, ok := s[k].(float64); !ok {
						t.Errorf("%s idle %s lacks %q", stack, side, k)
					}
				}
				if g, _ := s["goroutinesPerConn"].(float64); stack == "grpc-go" && g <= 0 {
					t.Errorf("grpc-go idle %s: goroutinesPerConn %v, want > 0", side, g)
				}
				// Only the client opens connections.
				if o, ok := s["openSeconds"].(float64); side == "client" && (!ok || o <= 0) || side == "server" && ok {
					t.Errorf("%s idle %s: openSeconds %v", stack, side, s["openSeconds"])
				}
			}
			continue
		}
		for _, k := range []string{"reqSize", "respSize", "concurrency", "seconds", "ops", "opsPerSec", "allocsPerOp", "bytesPerOp", "cpuMicrosPerOp"} {
			if _, ok := r[k].(float64); !ok {
				t.Errorf("%s %s lacks %q: %v", stack, workload, k, r)
			}
		}
		if ops, _ := r["ops"].(float64); ops <= 0 {
			t.Errorf("%s %s: ops = %v, want > 0", stack, workload, ops)
		}
		lat, _ := r["latencyMicros"].(map[string]any)
		for _, k := range []string{"p50", "p90", "p99", "max"} {
			if v, ok := lat[k].(float64); !ok || v <= 0 {
				t.Errorf("%s %s: latencyMicros.%s = %v, want > 0", stack, workload, k, lat[k])
			}
		}
		if lat["p50"].(float64) > lat["p99"].(float64) || lat["p99"].(float64) > lat["max"].(float64) {
			t.Errorf("%s %s: latencies out of order: %v", stack, workload, lat)
		}
	}
	for _, s := range stacks {
		for _, w := range []string{"unary", "streaming", "idle"} {
			if !seen[s+" "+w] {
				t.Errorf("no result for %s %s", s, w)
			}
		}
	}
}

// checkStackCell checks that a stack's first cell in a table row is
// either a number or an error reference explained below the table.
func checkStackCell(t *testing.T, out string, cfg []string, cells []string, stack string) {
	t.Helper()
	if len(cells) == 0 {
		t.Errorf("%v: no %s cells", cfg, stack)
		return
	}
	c := cells[0]
	if strings.HasPrefix(c, "error[") {
		note := "[" + strings.TrimPrefix(c, "error[") + " " + stack
		if !strings.Contains(out, note) || !strings.Contains(out, ": error: ") {
			t.Errorf("%v: %s cell %q has no footnote %q", cfg, stack, c, note)
		}
		return
	}
	if _, err := strconv.ParseFloat(c, 64); err != nil {
		t.Errorf("%v: %s cell %q is neither a number nor an error", cfg, stack, c)
	}
}

// TestRunCompressed: -compression reaches every stack's calls (a stack
// whose client failed to compress, or whose server failed to answer,
// would get an error row) and shows in the header and the JSON.
func TestRunCompressed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark briefly")
	}
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	args := []string{"-workloads", "unary,streaming", "-compression", "gzip", "-benchtime", "100ms", "-warmup", "10ms", "-rounds", "1",
		"-stacks", "all", "-json", jsonPath}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "compression: gzip") {
		t.Errorf("the header does not name the compressor:\n%s", stdout.String())
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if f.Env.Compression != "gzip" {
		t.Errorf("JSON env.compression = %q, want gzip", f.Env.Compression)
	}
	if len(f.Results) != 8 {
		t.Errorf("%d results, want 8 (2 workloads, 4 stacks)", len(f.Results))
	}
	for _, r := range f.Results {
		if r.Error != "" || r.Figures == nil {
			t.Errorf("%s %s: error %q", r.Stack, r.Workload, r.Error)
		}
	}
}

func TestFlagErrors(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-baseline", filepath.Join(t.TempDir(), "none")},
		{"-baseline", t.TempDir()},
		{"-baseline", self, "-baseline-name", "grpc-go"},
		{"-baseline", self, "-stacks", "leangrpc,baseline>grpc-go"},
		{"-workloads", "bogus"},
		{"-stacks", "nope"},
		{"-maxConcurrentCalls", "0"},
		{"-reqSizeBytes", "x"},
		{"-rounds", "0"},
		{"-compression", "nope"},
		{"extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if stderr.Len() == 0 {
			t.Errorf("%q: nothing on stderr", args)
		}
	}
}

func TestParseStacks(t *testing.T) {
	st, err := parseStacks("all")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range st {
		got = append(got, s.name+"="+s.client.name+"/"+s.server.name)
	}
	want := "leangrpc=leangrpc/leangrpc grpc-go=grpc-go/grpc-go leangrpc>grpc-go=leangrpc/grpc-go grpc-go>leangrpc=grpc-go/leangrpc"
	if strings.Join(got, " ") != want {
		t.Errorf("parseStacks(all) = %q, want %q", strings.Join(got, " "), want)
	}
	if st, err := parseStacks("grpc-go>grpc-go, grpc-go"); err != nil || len(st) != 1 || st[0].name != "grpc-go" {
		t.Errorf("grpc-go>grpc-go should be the stack grpc-go once, got %v, %v", st, err)
	}
}

func TestRatioPairs(t *testing.T) {
	for _, tc := range []struct {
		names, baselines []string
		want             []ratioPair
	}{
		{[]string{"grpc-go", "leangrpc"}, nil, []ratioPair{{"leangrpc", "grpc-go"}}},
		{[]string{"leangrpc", "leangrpc>grpc-go", "grpc-go"}, nil, []ratioPair{{"leangrpc", "grpc-go"}}},
		{[]string{"leangrpc", "leangrpc-nopool"}, nil, []ratioPair{{"leangrpc", "leangrpc-nopool"}}},
		{[]string{"leangrpc"}, nil, nil},
		{[]string{"leangrpc", "leangrpc-nopool", "grpc-go>leangrpc"}, nil, nil},
		{[]string{"leangrpc", "grpc-go", "old"}, []string{"old"}, []ratioPair{{"leangrpc", "grpc-go"}, {"old", "grpc-go"}}},
		{[]string{"leangrpc", "old"}, []string{"old"}, []ratioPair{{"leangrpc", "old"}}},
	} {
		if got := ratioPairsOf(tc.names, tc.baselines); !slices.Equal(got, tc.want) {
			t.Errorf("ratioPairsOf(%q, %q) = %v, want %v", tc.names, tc.baselines, got, tc.want)
		}
	}
	st, err := parseStacks("leangrpc-nopool,leangrpc-nopool>grpc-go")
	if err != nil || len(st) != 2 || st[0].server.name != stackLeanNoPool || st[1].server.name != stackGrpc {
		t.Errorf("parseStacks with leangrpc-nopool = %v, %v", st, err)
	}
}

func TestCrossProduct(t *testing.T) {
	plan, err := crossProduct("unary,idle", "1,2", "3", "4,5", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range plan {
		got = append(got, c.String())
	}
	want := []string{
		"unary 1B/3B calls=4 conns=1", "unary 1B/3B calls=5 conns=1",
		"unary 2B/3B calls=4 conns=1", "unary 2B/3B calls=5 conns=1",
		"idle conns=2000",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("plan = %q, want %q", got, want)
	}
}

// TestQuickSuite: the quick suite measures 2000 idle connections over
// plaintext and over TLS, has a certificate made for it without -tls, and
// under -tls runs every config over TLS, its two idle rows as one.
func TestQuickSuite(t *testing.T) {
	var got []string
	for _, c := range quickSuite() {
		got = append(got, c.String())
	}
	want := []string{
		"unary 100B/100B calls=120 conns=1",
		"streaming 100B/100B calls=120 conns=1",
		"streaming 1MB/1MB calls=16 conns=1",
		"unary 100B/100B calls=1 conns=1",
		"idle conns=2000",
		"idle conns=2000 tls",
	}
	if !slices.Equal(got, want) {
		t.Errorf("quick suite = %q, want %q", got, want)
	}
	tlsRow := config{workload: workloadIdle, connections: 2000, tls: true}
	if got := tlsRow.slug(); got != "idle-n2000-tls" {
		t.Errorf("TLS idle slug = %q, want idle-n2000-tls", got)
	}
	if got := tlsRow.workloadLabel(); got != "idle tls" {
		t.Errorf("TLS idle workload label = %q, want \"idle tls\"", got)
	}
	if got, want := planSecurity(quickSuite()), "plaintext (tls rows: "+tlsDescription+")"; got != want {
		t.Errorf("quick suite's security = %q, want %q", got, want)
	}

	sec, remove, err := newPlanTLS(quickSuite())
	if err != nil {
		t.Fatal(err)
	}
	if sec == nil {
		t.Fatal("no certificate for the quick suite's TLS idle row")
	}
	r := &runner{opts: options{tls: sec}}
	if r.security(tlsRow) != sec || r.security(quickSuite()[4]) != nil {
		t.Error("security: want the certificate for the TLS row only")
	}
	remove()
	if _, err := os.Stat(sec.certFile); !os.IsNotExist(err) {
		t.Errorf("certificate file after remove: %v", err)
	}
	if sec, _, err := newPlanTLS(quickSuite()[:5]); sec != nil || err != nil {
		t.Errorf("newPlanTLS of a plaintext plan = %v, %v; want nil, nil", sec, err)
	}

	// -tls: every config over TLS, one idle row.
	all := overTLS(quickSuite())
	got = got[:0]
	for _, c := range all {
		got = append(got, c.String())
	}
	want = []string{
		"unary 100B/100B calls=120 conns=1 tls",
		"streaming 100B/100B calls=120 conns=1 tls",
		"streaming 1MB/1MB calls=16 conns=1 tls",
		"unary 100B/100B calls=1 conns=1 tls",
		"idle conns=2000 tls",
	}
	if !slices.Equal(got, want) {
		t.Errorf("quick suite under -tls = %q, want %q", got, want)
	}
	if got := planSecurity(all); got != tlsDescription {
		t.Errorf("security under -tls = %q, want %q", got, tlsDescription)
	}
}

// TestReportTLSIdleRow: the idle table shows the plaintext and the TLS
// rows of the quick suite apart, each with its own figures, and the JSON
// marks the TLS results.
func TestReportTLSIdleRow(t *testing.T) {
	plan := quickSuite()
	stacks, err := parseStacks("grpc-go,leangrpc,raw")
	if err != nil {
		t.Fatal(err)
	}
	idle := func(stack string, tls bool, rss float64) Result {
		return Result{Stack: stack, Workload: workloadIdle, Connections: 2000, TLS: tls, Round: 1,
			Server: &IdleSide{RSSBytesPerConn: rss, GoroutinesPerConn: 1},
			Client: &IdleSide{RSSBytesPerConn: rss, GoroutinesPerConn: 1, OpenSeconds: 1}}
	}
	results := []Result{
		idle("grpc-go", false, 30000), idle("leangrpc", false, 10000),
		idle("grpc-go", true, 60000), idle("leangrpc", true, 20000),
	}
	var out bytes.Buffer
	printReport(&out, Env{Security: planSecurity(plan)}, plan, stacks, results)
	t.Logf("\n%s", out.String())
	if !strings.Contains(out.String(), "plaintext (tls rows: "+tlsDescription+")") {
		t.Errorf("header does not say which rows are TLS:\n%s", out.String())
	}
	for _, tc := range []struct {
		title     []string
		grpc, lgr string
	}{
		{[]string{"idle", "2000"}, "30000", "10000"},
		{[]string{"idle", "tls", "2000"}, "60000", "20000"},
	} {
		f := row(t, out.String(), "srv RSS/conn", tc.title...)
		// 9 columns per stack: grpc-go's first, then leangrpc's.
		if len(f) < 10 || f[0] != tc.grpc || f[9] != tc.lgr {
			t.Errorf("row %q = %q, want grpc-go %s and leangrpc %s server RSS/conn", tc.title, f, tc.grpc, tc.lgr)
		}
	}

	path := filepath.Join(t.TempDir(), "out.json")
	if err := writeJSON(path, &File{Results: results}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for i, r := range doc.Results {
		v, ok := r["tls"]
		if results[i].TLS && v != true || !results[i].TLS && ok {
			t.Errorf("result %d (%s, TLS %v): JSON tls = %v", i, r["stack"], results[i].TLS, v)
		}
	}
}

func TestWithSuffix(t *testing.T) {
	for in, want := range map[string]string{"cpu.out": "cpu.grpc-go.out", "dir/prof": "dir/prof.grpc-go"} {
		if got := withSuffix(in, "grpc-go"); got != want {
			t.Errorf("withSuffix(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRawStack: the raw stack runs the throughput workloads (its cells are
// numbers, and it allocates nothing per op), skips idle, and talks only
// to itself.
func TestRawStack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for a few seconds")
	}
	args := []string{
		"-workloads", "unary,streaming,idle", "-reqSizeBytes", "100", "-respSizeBytes", "100,100000",
		"-maxConcurrentCalls", "2", "-connections", "4",
		"-benchtime", "200ms", "-warmup", "50ms", "-rounds", "1", "-settle", "100ms",
		"-stacks", "raw,leangrpc",
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, cfg := range [][]string{
		{"unary", "100B/100B", "2", "4"},
		{"streaming", "100B/100kB", "2", "4"},
	} {
		f := row(t, out, "workload", cfg...)
		if ops, err := strconv.ParseFloat(f[0], 64); err != nil || ops <= 0 {
			t.Errorf("%v: raw ops/s cell %q, want a positive number", cfg, f[0])
		}
		if allocs, err := strconv.ParseFloat(f[2], 64); err != nil || allocs > 1 {
			t.Errorf("%v: raw allocs/op cell %q, want under 1", cfg, f[2])
		}
	}
	if regexp.MustCompile(`\braw\s+idle`).MatchString(stderr.String()) {
		t.Errorf("raw ran (or announced) the idle workload:\n%s", stderr.String())
	}
	if !regexp.MustCompile(`\bleangrpc\s+idle`).MatchString(stderr.String()) {
		t.Errorf("the progress lines do not show leangrpc's idle runs, so the check above cannot see raw's:\n%s", stderr.String())
	}
	for _, bad := range []string{"raw>leangrpc", "grpc-go>raw"} {
		if _, err := parseStacks(bad); err == nil {
			t.Errorf("parseStacks(%q) accepted a raw pairing", bad)
		}
	}
}
