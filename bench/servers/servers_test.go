package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.rounds != 3 || o.duration != 10*time.Second || o.warmup != 2*time.Second ||
		o.clients != 2 || o.streams != 50 || o.idleConns != 2000 || o.cargoJobs != 1 {
		t.Errorf("defaults = %+v", o)
	}
	if got := strings.Join(o.servers, ","); got != "tonic,leangrpc,grpc-go,nghttpd" {
		t.Errorf("servers = %q, want the round order tonic,leangrpc,grpc-go,nghttpd", got)
	}
	if got := strings.Join(grpcServers(o.servers), ","); got != "tonic,leangrpc,grpc-go" {
		t.Errorf("gRPC servers = %q, want all but nghttpd", got)
	}
}

func TestParseFlagsServers(t *testing.T) {
	o, err := parseFlags([]string{"-servers", " grpc-go,leangrpc,grpc-go,", "-rounds", "1", "-idle_conns", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.servers, ","); got != "grpc-go,leangrpc" {
		t.Errorf("servers = %q, want grpc-go,leangrpc (order kept, repeats dropped)", got)
	}
	if o.rounds != 1 || o.idleConns != 0 {
		t.Errorf("rounds %d idle_conns %d", o.rounds, o.idleConns)
	}
}

func TestParseFlagsRejects(t *testing.T) {
	for _, args := range [][]string{
		{"-servers", "nginx"},
		{"-servers", ","},
		{"-rounds", "0"},
		{"-duration", "10ms"},
		{"-warmup", "-1s"},
		{"-m", "0"},
		{"-payload", "-1"},
		{"-idle_conns", "-5"},
		{"-skip_build"},
		{"extra"},
		{"-nosuchflag"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

// h2loadOutput is the summary of a real h2load 1.52 run, shortened.
const h2loadOutput = `starting benchmark...
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 3.00s, 63286.33 req/s, 3.32MB/s
requests: 189859 total, 189959 started, 189859 done, 189859 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 189859 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 9.96MB (10442466) total, 370.84KB (379742) headers (space savings 94.74%), 4.53MB (4746475) data
                     min         max         mean         sd        +/- sd
time for request:       19us     15.54ms      1.49ms      1.36ms    87.39%
`

func TestParseH2load(t *testing.T) {
	r, err := parseH2load(h2loadOutput)
	if err != nil {
		t.Fatal(err)
	}
	want := h2loadResult{reqPerSec: 63286.33, done: 189859, succeeded: 189859, status2xx: 189859, dataBytes: 4746475}
	if r != want {
		t.Errorf("parseH2load = %+v, want %+v", r, want)
	}
	// 16-byte payloads: 25 bytes of DATA per response, as in that run.
	if err := r.check(unaryResponseFrameLen(16), 100); err != nil {
		t.Errorf("check: %v", err)
	}
}

func TestParseH2loadIncomplete(t *testing.T) {
	for _, cut := range []string{"finished in", "requests:", "status codes:", "traffic:"} {
		var kept []string
		for _, line := range strings.Split(h2loadOutput, "\n") {
			if !strings.HasPrefix(line, cut) {
				kept = append(kept, line)
			}
		}
		if _, err := parseH2load(strings.Join(kept, "\n")); err == nil {
			t.Errorf("output without %q parsed", cut)
		}
	}
}

func TestH2loadCheck(t *testing.T) {
	ok := h2loadResult{reqPerSec: 1, done: 10, succeeded: 10, status2xx: 10, dataBytes: 250}
	if err := ok.check(25, 4); err != nil {
		t.Fatalf("check of a clean run: %v", err)
	}
	// Responses still open when the window closed: counted in the status
	// codes and DATA, not as done.
	open := ok
	open.status2xx, open.dataBytes = 14, 350
	if err := open.check(25, 4); err != nil {
		t.Errorf("check with 4 responses open at the end: %v", err)
	}
	for name, mut := range map[string]func(*h2loadResult){
		"none done":     func(r *h2loadResult) { *r = h2loadResult{} },
		"errored":       func(r *h2loadResult) { r.errored = 1 },
		"failed":        func(r *h2loadResult) { r.failed, r.succeeded = 1, 9 },
		"timeout":       func(r *h2loadResult) { r.timeout = 1 },
		"non-2xx":       func(r *h2loadResult) { r.status2xx = 9 },
		"too many 2xx":  func(r *h2loadResult) { r.status2xx = 15 },
		"trailers-only": func(r *h2loadResult) { r.dataBytes = 225 }, // one grpc-status error
		"odd DATA":      func(r *h2loadResult) { r.dataBytes = 251 },
		"too much DATA": func(r *h2loadResult) { r.dataBytes = 375 },
	} {
		r := ok
		mut(&r)
		if err := r.check(25, 4); err == nil {
			t.Errorf("%s: check passed", name)
		}
	}
}

func TestUnaryRequestFrame(t *testing.T) {
	b := unaryRequestFrame(16)
	if b[0] != 0 || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
		t.Fatalf("frame header % x for %d bytes", b[:5], len(b))
	}
	var req testpb.SimpleRequest
	if err := proto.Unmarshal(b[5:], &req); err != nil {
		t.Fatal(err)
	}
	if req.GetResponseSize() != 16 || len(req.GetPayload().GetBody()) != 16 {
		t.Errorf("request %v", &req)
	}
	if got := unaryResponseFrameLen(16); got != 25 {
		t.Errorf("response frame of a 16-byte payload: %d bytes, want 25", got)
	}
	if got := h2loadArgs(options{clients: 2, streams: 50}, "127.0.0.1:1", "/b", 1500*time.Millisecond); strings.Join(got, " ") !=
		"-c 2 -m 50 -D 1500ms -d /b -H content-type: application/grpc -H te: trailers http://127.0.0.1:1/grpc.testing.TestService/UnaryCall" {
		t.Errorf("h2load args %q", got)
	}
}

func TestParseProc(t *testing.T) {
	stat := "4242 (odd) name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 731 269 0 0 20 0 6 0 100 0 0"
	if got, err := parseStatCPU(stat); err != nil || got != 1000 {
		t.Errorf("parseStatCPU = %d, %v; want 1000", got, err)
	}
	if _, err := parseStatCPU("4242 (x) S 1"); err == nil {
		t.Error("short stat parsed")
	}
	status := "Name:\tx\nVmRSS:\t   10240 kB\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t3\n"
	if got, err := parseVmRSS(status); err != nil || got != 10240<<10 {
		t.Errorf("parseVmRSS = %d, %v", got, err)
	}
	if _, err := parseVmRSS("Name:\tx\n"); err == nil {
		t.Error("status without VmRSS parsed")
	}
	if got := parseContextSwitches(status); got != 10 {
		t.Errorf("parseContextSwitches = %d, want 10", got)
	}
}

func TestParseStraceSummary(t *testing.T) {
	const out = `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.600000           6    100000           write
 30.00    0.300000           3    100000     50000 read
 10.00    0.100000           1    200000       120 futex
------ ----------- ----------- --------- --------- ----------------
100.00    1.000000           2    400000     50120 total
`
	got, err := parseStraceSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []syscallCount{{"futex", 200000}, {"write", 100000}, {"read", 100000}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d = %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := parseStraceSummary("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n"); err == nil {
		t.Error("an strace error parsed as a summary")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestWriteReport(t *testing.T) {
	runs := []runResult{
		{server: serverTonic, round: 1, reqPerSec: 1000, requests: 10000, cpu: 200 * time.Millisecond, clientCPU: 100 * time.Millisecond, ctxsw: 5000},
		{server: serverLeangrpc, round: 1, reqPerSec: 800, requests: 8000, cpu: 200 * time.Millisecond, clientCPU: 80 * time.Millisecond, ctxsw: 8000},
		{server: serverLeangrpc, round: 2, reqPerSec: 900, requests: 9000, cpu: 180 * time.Millisecond, clientCPU: 72 * time.Millisecond, ctxsw: 9000},
		{server: serverLeangrpc, round: 3, reqPerSec: 1, err: errors.New("boom")},
		{server: serverGrpcGo, round: 1, err: errors.New("boom")},
		{server: serverNghttpd, round: 1, reqPerSec: 2000, requests: 20000, cpu: 100 * time.Millisecond, clientCPU: 180 * time.Millisecond, ctxsw: 2000},
	}
	idle := []idleResult{
		{server: serverTonic, conns: 100, base: 1 << 20, loaded: 1<<20 + 2_000_000},
		{server: serverLeangrpc, conns: 100, base: 1 << 20, loaded: 1<<20 + 500_000},
	}
	var buf bytes.Buffer
	writeReport(&buf, allServers, runs, idle)
	out := buf.String()
	for _, want := range []string{
		"| tonic | 1000 | 20.0 | 0.50 | 10.0 | 20.0 KB | 1 |",
		"| leangrpc | 850 | 22.5 | 1.00 | 9.0 | 5.0 KB | 2 |", // medians of the two good rounds
		"| grpc-go | failed |",
		"| nghttpd | 2000 | 5.0 | 0.10 | 9.0 | — | 1 |",
		"leangrpc/tonic: req/s 0.85x, CPU per request 1.12x, context switches per request 2.00x, idle RSS per connection 0.25x",
		"leangrpc/nghttpd: req/s 0.42x, CPU per request 4.50x, context switches per request 10.00x\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "leangrpc/grpc-go") {
		t.Errorf("report has a ratio to a server with no good round:\n%s", out)
	}

	runs = runs[:len(runs)-1] // nghttpd has no streaming runs
	for i := range runs {
		runs[i].streaming = true
	}
	buf.Reset()
	writeStreamReport(&buf, grpcServers(allServers), runs)
	out = buf.String()
	for _, want := range []string{
		"| leangrpc | 850 | 22.5 | 1.00 | 9.0 | 2 |",
		"leangrpc/tonic: messages/s 0.85x, CPU per message 1.12x, context switches per message 2.00x\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("streaming report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "idle") || strings.Contains(out, serverNghttpd) {
		t.Errorf("streaming report shows idle figures or nghttpd:\n%s", out)
	}
	if got := runs[1].line(); !strings.Contains(got, "streaming") || !strings.Contains(got, "msg/s") {
		t.Errorf("streaming run line %q", got)
	}
}

func TestParseAllocCounts(t *testing.T) {
	allocs, total, err := parseMemstats("interop server (leangrpc): 2026/11/26 10:00:00.000000 stopping\n" +
		"interop server (leangrpc): 2026/11/26 10:00:00.000001 memstats: mallocs 8000123 bytes 1092400000 gc 512\n")
	if err != nil || allocs != 8000123 || total != 1092400000 {
		t.Errorf("parseMemstats = %d, %d, %v", allocs, total, err)
	}
	if _, _, err := parseMemstats("stopping\n"); err == nil {
		t.Error("a log without memstats parsed")
	}

	// perf stat -x, as perf 6 writes it.
	counts, err := parsePerfCounts("\n# started on Thu Nov 26 10:00:00 2026\n\n" +
		"14412660,,probe_libc:malloc,25423618180,100.00,,\n400000,,probe_libc:calloc,25423618180,100.00,,\n50,,probe_libc:realloc,25423618180,100.00,,\n")
	if err != nil {
		t.Fatal(err)
	}
	if counts["probe_libc:malloc"] != 14412660 || counts["probe_libc:calloc"] != 400000 || counts["probe_libc:realloc"] != 50 {
		t.Errorf("parsePerfCounts = %v", counts)
	}
	if _, err := parsePerfCounts("<not counted>,,probe_libc:malloc,0,0.00,,\n"); err == nil {
		t.Error("an uncounted event parsed")
	}
	if _, err := parsePerfCounts("# started on Thu Nov 26 10:00:00 2026\n"); err == nil {
		t.Error("perf output without counts parsed")
	}

	var buf bytes.Buffer
	writeAllocs(&buf, serverLeangrpc, allocCounts{requests: 400000, allocs: 8000000, bytes: 1092400000, detail: "d"}, nil)
	if got, want := buf.String(), "leangrpc 20.0 allocations/request, 2731 B/request over 400000 requests (d)\n"; got != want {
		t.Errorf("writeAllocs = %q, want %q", got, want)
	}
}
