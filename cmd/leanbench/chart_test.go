package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// svgDoc is what the tests read back from a chart.
type svgDoc struct {
	polylines []map[string]string // attributes of each <polyline>
	texts     []string            // the content of each <text>
}

// parseSVG checks that data is well-formed XML whose root is an <svg> in
// the SVG namespace, and collects its polylines and texts.
func parseSVG(t *testing.T, data []byte) svgDoc {
	t.Helper()
	var doc svgDoc
	dec := xml.NewDecoder(bytes.NewReader(data))
	var inText bool
	var text strings.Builder
	root := true
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root {
				root = false
				if el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root element %v, want svg in the SVG namespace", el.Name)
				}
			}
			switch el.Name.Local {
			case "polyline":
				attrs := map[string]string{}
				for _, a := range el.Attr {
					attrs[a.Name.Local] = a.Value
				}
				doc.polylines = append(doc.polylines, attrs)
			case "text":
				inText = true
				text.Reset()
			case "script", "image", "foreignObject", "style":
				t.Errorf("the chart has a <%s> element", el.Name.Local)
			}
		case xml.CharData:
			if inText {
				text.Write(el)
			}
		case xml.EndElement:
			if el.Name.Local == "text" {
				inText = false
				doc.texts = append(doc.texts, text.String())
			}
		}
	}
	if root {
		t.Fatal("the chart is empty")
	}
	// Nothing to fetch: the namespace is the one URL.
	for _, u := range regexp.MustCompile(`(?i)https?:[^"'\s<>]*`).FindAllString(string(data), -1) {
		if u != "http://www.w3.org/2000/svg" {
			t.Errorf("the chart refers to %q", u)
		}
	}
	if strings.Contains(string(data), "href") {
		t.Error("the chart has an href")
	}
	return doc
}

// checkChart checks a chart's panels and labels for stacks and sizes.
func checkChart(t *testing.T, doc svgDoc, stacks []string, sizes []int) {
	t.Helper()
	perStack := map[string]int{}
	for _, p := range doc.polylines {
		perStack[p["data-stack"]]++
	}
	if len(doc.polylines) != 2*len(stacks) {
		t.Errorf("%d polylines, want %d (one per stack per panel): %v", len(doc.polylines), 2*len(stacks), perStack)
	}
	for _, s := range stacks {
		if perStack[s] != 2 {
			t.Errorf("stack %s has %d polylines, want 2", s, perStack[s])
		}
		if !slices.Contains(doc.texts, s) {
			t.Errorf("the legend does not name %s", s)
		}
	}
	for _, n := range sizes {
		if l := chartSizeLabel(n); !slices.Contains(doc.texts, l) {
			t.Errorf("no tick label %q", l)
		}
	}
	for _, want := range []string{"Throughput", "CPU per MB", "MB/s", "µs"} {
		if !slices.ContainsFunc(doc.texts, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no text mentions %q", want)
		}
	}
}

// TestChartSVG draws synthetic results: three rounds per point, one stack
// with a failed size, and a stack name that needs escaping.
func TestChartSVG(t *testing.T) {
	stacks, err := parseStacks("leangrpc,grpc-go,raw,leangrpc>grpc-go")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := chartPlan(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var results []Result
	for i, c := range plan {
		for si, st := range stacks {
			for round := 1; round <= 3; round++ {
				res := Result{Stack: st.name, Workload: c.workload, Connections: c.connections, Round: round,
					Shape: &Shape{ReqSize: c.reqSize, RespSize: c.respSize, Concurrency: c.concurrency}}
				if st.name == stackGrpc && c.reqSize == 16<<20 {
					res.Error = "boom"
				} else {
					// Rounds 1, 2, 3 at 0.5, 1 and 3 times the point's
					// value: the median is the value itself.
					mbps := float64(100*(i+1)*(si+1)) * []float64{0.5, 1, 3}[round-1]
					res.Figures = &Figures{MBPerSec: mbps, CPUMicrosPerOp: mbps}
				}
				results = append(results, res)
			}
		}
	}
	env := Env{Go: "go1.99", GOOS: "linux", GOARCH: "amd64", CPUs: 2, GOMAXPROCS: 2, GrpcGo: "v1.85.0", Leangrpc: "dev", Time: "2026-01-02T03:04:05Z"}
	o := options{rounds: 3, benchtime: 2 * time.Second, warmup: 500 * time.Millisecond}
	args := []string{"-chart", "docs/chart.svg", "-stacks", "leangrpc,grpc-go,raw,leangrpc>grpc-go"}
	d := newChartData(env, o, args, plan, stacks, results)

	if got := d.series[0].mbPerSec[2]; got != 300 {
		t.Errorf("leangrpc at 16 KiB: %v MB/s, want the median 300", got)
	}
	// 300 MB/s and 300 µs CPU per op of 2 × 16 KiB.
	if got, want := d.series[0].cpuPerMB[2], 300/(2*16384/1e6); got != want {
		t.Errorf("leangrpc at 16 KiB: %v µs CPU/MB, want %v", got, want)
	}
	if d.series[1].mbPerSec[7] != 0 {
		t.Errorf("grpc-go at 16 MiB failed but has %v MB/s", d.series[1].mbPerSec[7])
	}

	var b strings.Builder
	d.writeSVG(&b)
	svg := b.String()
	doc := parseSVG(t, []byte(svg))
	checkChart(t, doc, []string{"leangrpc", "grpc-go", "raw", "leangrpc>grpc-go"}, chartLadder)
	for _, p := range doc.polylines {
		want := 8
		if p["data-stack"] == stackGrpc {
			want = 7
		}
		if n := len(strings.Fields(p["points"])); n != want {
			t.Errorf("%s: %d points, want %d", p["data-stack"], n, want)
		}
	}
	joined := strings.Join(doc.texts, "\n")
	for _, want := range []string{
		"go1.99 linux/amd64, 2 CPUs (GOMAXPROCS 2), load average 0.0 at start, grpc-go v1.85.0, leangrpc dev, plaintext, 2026-01-02T03:04:05Z",
		"Made by: leanbench -chart docs/chart.svg -stacks 'leangrpc,grpc-go,raw,leangrpc>grpc-go'",
		"grpc-go at 16 MiB",
		"medians of 3 rounds of 2s (+500ms warmup)",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("the chart's texts lack %q:\n%s", want, joined)
		}
	}
}

func TestChartPlan(t *testing.T) {
	plan, err := chartPlan(map[string]bool{}, "100")
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 8 || plan[0].String() != "streaming 1KiB/1KiB calls=16 conns=1" || plan[7].String() != "streaming 16MiB/16MiB calls=16 conns=1" {
		t.Errorf("default plan %v", plan)
	}
	plan, err = chartPlan(map[string]bool{"reqSizeBytes": true}, "65536,1024,1024")
	if err != nil || len(plan) != 2 || plan[0].reqSize != 1024 || plan[1].respSize != 65536 {
		t.Errorf("-reqSizeBytes 65536,1024,1024: %v, %v", plan, err)
	}
	for _, set := range []map[string]bool{{"workloads": true}, {"respSizeBytes": true}, {"maxConcurrentCalls": true}, {"connections": true}} {
		if _, err := chartPlan(set, "100"); err == nil {
			t.Errorf("chartPlan accepted %v", set)
		}
	}
	if _, err := chartPlan(map[string]bool{"reqSizeBytes": true}, "33554432"); err == nil {
		t.Error("chartPlan accepted 32 MiB")
	}
}

func TestChartFlagErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-chart", filepath.Join(dir, "c.svg"), "-workloads", "streaming"},
		{"-chart", filepath.Join(dir, "c.svg"), "-maxConcurrentCalls", "16"},
		{"-chart", filepath.Join(dir, "c.svg"), "-reqSizeBytes", "0"},
		{"-chart", filepath.Join(dir, "none", "c.svg")},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "leanbench: ") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a reason", args, code, stderr.String())
		}
	}
}

// TestRunTimeout: large messages get time to move on top of -timeout,
// small ones next to none.
func TestRunTimeout(t *testing.T) {
	small := config{workload: workloadStreaming, reqSize: 100, respSize: 100, concurrency: 120}
	if got := runTimeout(15*time.Second, small); got-15*time.Second > time.Millisecond {
		t.Errorf("runTimeout(15s, 100 B x 120) = %v, want about 15s", got)
	}
	top := config{workload: workloadStreaming, reqSize: 16 << 20, respSize: 16 << 20, concurrency: chartStreams}
	// 16 streams x 32 MiB at 50 MB/s: 10.7s.
	if got := runTimeout(15*time.Second, top); got < 25*time.Second || got > 26*time.Second {
		t.Errorf("runTimeout(15s, 16 MiB x 16) = %v, want about 25.7s", got)
	}
}

func TestLogAxis(t *testing.T) {
	for _, tc := range []struct {
		vs     []float64
		lo, hi float64
		ticks  string
	}{
		{nil, 1, 10, "1 10"},
		{[]float64{0, 900, 1100}, 500, 2000, "500 1000 2000"},
		{[]float64{100}, 100, 200, "100 200"},
		{[]float64{0.03, 4}, 0.02, 5, "0.02 0.05 0.1 0.2 0.5 1 2 5"},
		{[]float64{3, 40000}, 1, 100000, "1 10 100 1000 10000 100000"},
	} {
		lo, hi, ticks := logAxis(tc.vs)
		var got []string
		for _, v := range ticks {
			got = append(got, tickLabel(v))
		}
		want := strings.ReplaceAll(strings.ReplaceAll(tc.ticks, "10000 ", "10k "), "100000", "100k")
		if lo != tc.lo || hi != tc.hi || strings.Join(got, " ") != want {
			t.Errorf("logAxis(%v) = %v, %v, %q; want %v, %v, %q", tc.vs, lo, hi, got, tc.lo, tc.hi, want)
		}
	}
}

// TestRunChart runs -chart on a short ladder, 1 KiB and 4 MiB (above
// grpc-go's default receive limit once framed), for the default stacks,
// and checks the chart against the JSON of the same run.
func TestRunChart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for a few seconds")
	}
	dir := t.TempDir()
	chartPath, jsonPath := filepath.Join(dir, "chart.svg"), filepath.Join(dir, "out.json")
	args := []string{"-chart", chartPath, "-reqSizeBytes", "1024,4194304",
		"-benchtime", "100ms", "-warmup", "20ms", "-rounds", "1", "-json", jsonPath}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	t.Logf("stdout:\n%s", stdout.String())
	for _, want := range []string{"streaming 1KiB/1KiB calls=16 conns=1", "streaming 4MiB/4MiB calls=16 conns=1", "wrote " + chartPath} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	data, err := os.ReadFile(chartPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, data)
	checkChart(t, doc, []string{"leangrpc", "grpc-go", "raw"}, []int{1 << 10, 4 << 20})

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Results) != 6 {
		t.Fatalf("%d results, want 6 (2 sizes x 3 stacks)", len(f.Results))
	}
	for _, r := range f.Results {
		if r.Error != "" || r.Figures == nil {
			t.Errorf("%s at %d B: error %q", r.Stack, r.ReqSize, r.Error)
		}
	}
	for _, p := range doc.polylines {
		if n := len(strings.Fields(p["points"])); n != 2 {
			t.Errorf("%s: %d points, want 2", p["data-stack"], n)
		}
	}
}
