package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// -baseline runs another leanbench binary's leangrpc as one more stack,
// interleaved with the others: its children are that binary's, asked for
// their stack leangrpc; its results carry the baseline's name, and the
// tables show its ratio against grpc-go beside leangrpc's. The baseline
// here is a script that records its arguments and runs this test binary.
func TestRunBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for a few seconds")
	}
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in baseline is a shell script")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "old-leanbench")
	body := "#!/bin/sh\necho \"$@\" >> '" + log + "'\nexec '" + self + "' \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	jsonPath := filepath.Join(dir, "out.json")
	args := []string{
		"-workloads", "unary,idle", "-maxConcurrentCalls", "2", "-connections", "4",
		"-benchtime", "200ms", "-warmup", "50ms", "-rounds", "2", "-settle", "100ms",
		"-stacks", "leangrpc,grpc-go", "-baseline", script, "-baseline-name", "old", "-json", jsonPath,
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	t.Logf("stdout:\n%s", out)

	// Interleaved: each round runs the three stacks in turn.
	var order []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, "[") && strings.Contains(l, "unary") {
			order = append(order, strings.Fields(l)[3])
		}
	}
	if want := "leangrpc grpc-go old leangrpc grpc-go old"; strings.Join(order, " ") != want {
		t.Errorf("unary runs in order %q, want %q", strings.Join(order, " "), want)
	}
	calls, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run-one -stack leangrpc ", "idle-server -stack leangrpc ", "idle-client -stack leangrpc "} {
		if n := strings.Count(string(calls), want); n != 2 {
			t.Errorf("the baseline binary ran %q %d times, want 2 (one per round):\n%s", want, n, calls)
		}
	}
	for _, want := range []string{"leangrpc/grpc-go", "old/grpc-go", "ratio group is its title's quotient"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	f := row(t, out, "workload", "unary", "100B/100B", "2", "4")
	checkStackCell(t, out, []string{"unary"}, f[12:], "old") // 6 columns per stack

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []struct {
			Stack    string `json:"stack"`
			Workload string `json:"workload"`
			Error    string `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range doc.Results {
		if r.Stack == "old" {
			n++
			if r.Error != "" {
				t.Errorf("baseline %s: %s", r.Workload, r.Error)
			}
		}
	}
	if n != 4 {
		t.Errorf("%d results of the baseline, want 4 (2 workloads x 2 rounds)", n)
	}
}
