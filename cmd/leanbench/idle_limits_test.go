package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// thisMachine is the machine the idle workload was first taken to its
// limit on: 20,000 files per process and the default port range.
var thisMachine = idleLimits{files: 20000, portLow: 32768, portHigh: 60999}

// TestPlanIdleRefusesBeyondFileLimit: a size beyond the descriptors a
// child may hold is refused with the limit, what the size needs, the
// shortfall and the largest size that fits.
func TestPlanIdleRefusesBeyondFileLimit(t *testing.T) {
	_, err := planIdle(25000, thisMachine)
	if err == nil {
		t.Fatal("25000 connections with a limit of 20000 files: no error")
	}
	for _, want := range []string{
		"-connections 25000",
		"about 25064 open files",
		"5064 more",
		"RLIMIT_NOFILE hard limit 20000",
		"at most 19936 connections fit",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if _, err := planIdle(19936, thisMachine); err != nil {
		t.Errorf("19936 connections, the most that fit: %v", err)
	}
	if _, err := planIdle(19937, thisMachine); err == nil || !strings.Contains(err.Error(), " 1 more ") {
		t.Errorf("19937 connections: %v, want one file short", err)
	}
}

// TestPlanIdleSources: the client spreads its connections over as many
// source addresses as half the port range each requires, and over one
// (the kernel's choice) when they fit.
func TestPlanIdleSources(t *testing.T) {
	tiny := idleLimits{portLow: 1000, portHigh: 1099} // 50 ports preferred, 45 used
	for _, tc := range []struct {
		lim     idleLimits
		n, want int
	}{
		{thisMachine, 2000, 1},
		{thisMachine, 12705, 1}, // 14116 even ports, less a tenth
		{thisMachine, 12706, 2},
		{thisMachine, 19000, 2},
		{idleLimits{files: 1 << 20, portLow: 32768, portHigh: 60999}, 100000, 8},
		{tiny, 45, 1},
		{tiny, 46, 2},
		{tiny, 1000, 23},
		{idleLimits{}, 1 << 20, 1}, // limits unknown: nothing to spread for
	} {
		p, err := planIdle(tc.n, tc.lim)
		if err != nil {
			t.Errorf("%d connections, %+v: %v", tc.n, tc.lim, err)
			continue
		}
		if p.sources != tc.want {
			t.Errorf("%d connections, %+v: %d sources, want %d", tc.n, tc.lim, p.sources, tc.want)
		}
		if p.sources > 1 && p.sources*tc.lim.portsPerSource() < tc.n {
			t.Errorf("%d connections, %+v: %d sources of %d ports are too few", tc.n, tc.lim, p.sources, tc.lim.portsPerSource())
		}
	}
}

// TestPlanIdleRefusesBeyondLoopback: ports are a limit too, once 127/8 has
// no source address left.
func TestPlanIdleRefusesBeyondLoopback(t *testing.T) {
	oneEach := idleLimits{portLow: 5000, portHigh: 5001} // one port per source
	if _, err := planIdle(maxLoopbackSources, oneEach); err != nil {
		t.Fatalf("one connection per address of 127/8: %v", err)
	}
	_, err := planIdle(maxLoopbackSources+2, oneEach)
	if err == nil {
		t.Fatal("more connections than 127/8 has source addresses: no error")
	}
	for _, want := range []string{"ip_local_port_range 5000-5001", "2 more than 127/8 has", "at most " + strconv.Itoa(maxLoopbackSources) + " connections fit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// TestCheckIdleLimits: the whole plan is checked up front; a size that
// spreads says so, one that does not fit is the error.
func TestCheckIdleLimits(t *testing.T) {
	var w bytes.Buffer
	plan := []config{{workload: workloadUnary, connections: 1}, {workload: workloadIdle, connections: 2000}, {workload: workloadIdle, connections: 19000}}
	if err := checkIdleLimits(&w, plan, thisMachine); err != nil {
		t.Fatal(err)
	}
	const note = "idle: the client spreads 19000 connections over 2 source addresses, 127.0.0.1 to 127.0.0.2, 12705 at most from each"
	if !strings.HasPrefix(w.String(), note) || strings.Count(w.String(), "\n") != 1 {
		t.Errorf("notes:\n%s\nwant one line starting %q", w.String(), note)
	}
	plan = append(plan, config{workload: workloadIdle, connections: 25000})
	if err := checkIdleLimits(&w, plan, thisMachine); err == nil || !strings.Contains(err.Error(), "-connections 25000") {
		t.Errorf("with 25000 connections: %v", err)
	}
}

// TestRunRefusesTooManyConnections: leanbench exits at once, before any
// child, when -connections is beyond this machine's file limit.
func TestRunRefusesTooManyConnections(t *testing.T) {
	_, hard, err := fileLimits()
	if err != nil || hard > 1<<24 {
		t.Skipf("no finite file limit to exceed (%d, %v)", hard, err)
	}
	n := strconv.FormatUint(hard, 10) // hard connections need hard+64 files
	var stdout, stderr bytes.Buffer
	code := run([]string{"-workloads", "idle", "-connections", "20," + n, "-stacks", "leangrpc,grpc-go"}, &stdout, &stderr)
	if code == 0 {
		t.Fatalf("exit 0\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	if want := "leanbench: -connections " + n + " needs about"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if strings.Contains(stderr.String(), "round 1/") {
		t.Errorf("a run started before the refusal:\n%s", stderr.String())
	}
}
