// Command leanbench runs grpc-go's BenchmarkService over leangrpc and over
// grpc-go, side by side in one run, and reports each stack's medians and the
// ratio leangrpc/grpc-go.
//
// With no flags it runs a quick suite of about two minutes:
//
//	go run ./cmd/leanbench
//
// Other forms:
//
//	leanbench -workloads unary,streaming -reqSizeBytes 100,10000 -maxConcurrentCalls 1,64 -json out.json
//	leanbench -workloads idle -connections 2000
//	leanbench -workloads unary -compression gzip
//	leanbench -rounds 5 -baseline /tmp/leanbench-old
//	leanbench -chart docs/chart.svg -rounds 3
//	leanbench compare OLD.json NEW.json
//
// List flags take comma-separated values and run their cross product. The
// stacks run interleaved (A B A B ...) for -rounds rounds. Progress goes to
// stderr, the results table to stdout.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the flags that apply to every run.
type options struct {
	benchtime      time.Duration
	warmup         time.Duration
	rounds         int
	settle         time.Duration
	timeout        time.Duration
	jsonPath       string
	cpuprofile     string
	memprofile     string
	memProfileRate int
	// compression is the compressor every stack's client sends with
	// (grpc.UseCompressor), "" for none; the servers answer in kind.
	compression string
	// tls is the certificate of the TLS configs (newPlanTLS), nil when
	// every config is plaintext; a run takes it through security. In a
	// run-one child it is the run's own.
	tls *benchTLS
	// backends is how many servers each throughput run starts, and lb
	// the policy the clients spread their calls over them with (see
	// backends.go); 1 and "" dial the one server directly.
	backends int
	lb       string
}

// runner executes a plan and collects its results.
type runner struct {
	opts     options
	stdout   io.Writer
	stderr   io.Writer
	multiRun bool // more than one throughput run per stack: profile names carry the run
	started  time.Time
}

func (r *runner) progressf(format string, args ...any) {
	fmt.Fprintf(r.stderr, format+"\n", args...)
}

// run is main without the process around it, so that tests can call it.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "compare":
			return runCompare(args[1:], stdout, stderr)
		case runOneCmd:
			return runOne(args[1:], stdout, stderr)
		case idleServerCmd:
			return runIdleServer(args[1:], os.Stdin, stdout, stderr)
		case idleClientCmd:
			return runIdleClient(args[1:], os.Stdin, stdout, stderr)
		}
	}

	fs := flag.NewFlagSet("leanbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workloads := fs.String("workloads", workloadUnary, "comma-separated workloads: unary, streaming, idle")
	reqSizes := fs.String("reqSizeBytes", "100", "comma-separated request payload sizes in bytes")
	respSizes := fs.String("respSizeBytes", "100", "comma-separated response payload sizes in bytes")
	concs := fs.String("maxConcurrentCalls", "1", "comma-separated numbers of calls in flight (streams, for streaming)")
	connsFlag := fs.String("connections", "", "comma-separated numbers of client connections (default 1; idle: 2000)")
	stacksFlag := fs.String("stacks", "leangrpc,grpc-go,raw", "comma-separated stacks: leangrpc, grpc-go, raw (length-prefixed messages over TCP: the floor), leangrpc>grpc-go, grpc-go>leangrpc (client>server), all, leangrpc-nopool (pooled reads off), leangrpc-nolowat (the receive low-water mark off), leangrpc-http and grpc-go-http (each server's ServeHTTP in net/http over HTTP/2 with prior knowledge, grpc-go's client), or leangrpc-connect and connect-go (the Connect protocol over HTTP/2, connect-go's client, against leangrpc's own listener and connect-go's handler)")
	var o options
	fs.DurationVar(&o.benchtime, "benchtime", 2*time.Second, "measured time of each run")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured time before each run")
	fs.IntVar(&o.rounds, "rounds", 2, "rounds; the stacks run interleaved and the table shows medians")
	fs.DurationVar(&o.settle, "settle", time.Second, "idle: time to let connections go idle before measuring")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Second, "bound on a run's setup and first RPC, on its last RPC past -benchtime, and on each idle connection's RPC; a stack that exceeds it gets an error row")
	fs.StringVar(&o.jsonPath, "json", "", "write the results as JSON to this file")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of each measured run; the file name gets the stack (and run) as suffix")
	fs.StringVar(&o.memprofile, "memprofile", "", "write an allocation profile after each measured run, and FILE.base before it (go tool pprof -base FILE.base FILE); idle: a heap profile of each child after measuring (FILE.STACK.server, FILE.STACK.client; FILE.STACK.tls.server, FILE.STACK.tls.client for a TLS row)")
	fs.IntVar(&o.memProfileRate, "memprofilerate", 0, "runtime.MemProfileRate while profiling (0: leave the default)")
	fs.StringVar(&o.compression, "compression", "", "compressor every client's calls use (grpc.UseCompressor), e.g. gzip; the servers answer in kind (default none)")
	fs.IntVar(&o.backends, "backends", 1, "servers per throughput run; with more than one, each client channel balances its calls over all of them with -lb")
	fs.StringVar(&o.lb, "lb", "", "load-balancing policy of the clients over the -backends servers, from grpc-go's registry (default pick_first)")
	baseline := fs.String("baseline", "", "another leanbench binary (built from another commit, say): its leangrpc runs as one more stack, interleaved with the others, named by -baseline-name")
	baselineName := fs.String("baseline-name", "baseline", "the stack name of -baseline's leangrpc")
	chartPath := fs.String("chart", "", "run streaming with 16 streams over message sizes from 1 KiB to 16 MiB (request = response; -reqSizeBytes replaces the sizes) and draw throughput and CPU per MB against size as an SVG file")
	useTLS := fs.Bool("tls", false, "every stack and workload over TLS ("+tlsDescription+", a certificate made at start, grpc-go's credentials.NewTLS on both stacks); the quick suite then has one idle row, over TLS")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: leanbench [flags]\n       leanbench compare OLD.json NEW.json\n\n"+
			"Without -workloads, -reqSizeBytes, -respSizeBytes, -maxConcurrentCalls and\n"+
			"-connections it runs the quick suite (about two minutes); the other flags apply to it.\n"+
			"-chart runs its own ladder of sizes instead (about three minutes).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "leanbench: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if o.rounds < 1 || o.benchtime <= 0 || o.timeout <= 0 || o.warmup < 0 || o.settle < 0 {
		fmt.Fprintln(stderr, "leanbench: -rounds must be >= 1, -benchtime and -timeout > 0, -warmup and -settle >= 0")
		return 2
	}
	list := *stacksFlag
	if *baseline != "" {
		if err := addBaseline(*baselineName, *baseline); err != nil {
			fmt.Fprintf(stderr, "leanbench: %v\n", err)
			return 2
		}
		if !slices.Contains(strings.Split(list, ","), *baselineName) {
			list += "," + *baselineName
		}
	}
	stacks, err := parseStacks(list)
	if err != nil {
		fmt.Fprintf(stderr, "leanbench: %v\n", err)
		return 2
	}
	if err := checkCompression(o.compression); err != nil {
		fmt.Fprintf(stderr, "leanbench: %v\n", err)
		return 2
	}
	if err := checkLB(o.lb); err != nil || o.backends < 1 {
		fmt.Fprintf(stderr, "leanbench: %v (and -backends must be >= 1)\n", err)
		return 2
	}

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	shaping := set["workloads"] || set["reqSizeBytes"] || set["respSizeBytes"] || set["maxConcurrentCalls"] || set["connections"]
	var plan []config
	switch {
	case *chartPath != "":
		plan, err = chartPlan(set, *reqSizes)
		if err == nil {
			err = checkChartPath(*chartPath)
		}
	case shaping:
		plan, err = crossProduct(*workloads, *reqSizes, *respSizes, *concs, *connsFlag)
	default:
		plan = quickSuite()
		fmt.Fprintln(stderr, "leanbench: no workload flags, running the quick suite")
	}
	if err != nil {
		fmt.Fprintf(stderr, "leanbench: %v\n", err)
		return 2
	}
	if *useTLS {
		plan = overTLS(plan)
	}
	if slices.ContainsFunc(stacks, func(st stack) bool { return st.name != stackRaw }) {
		// Before anything runs: a size beyond the machine's limits would
		// otherwise fail only after the smaller ones, minutes in.
		if err := checkIdleLimits(stderr, plan, readIdleLimits()); err != nil {
			fmt.Fprintf(stderr, "leanbench: %v\n", err)
			return 2
		}
	}

	// Also without -tls: the quick suite has a TLS idle row.
	sec, removeTLS, err := newPlanTLS(plan)
	if err != nil {
		fmt.Fprintf(stderr, "leanbench: TLS certificate: %v\n", err)
		return 1
	}
	defer removeTLS()
	o.tls = sec

	// The environment, and the load average in particular, as it was
	// before leanbench added its own load.
	env := currentEnv(args)
	env.Compression = o.compression
	if o.backends > 1 || o.lb != "" {
		env.Balancing = fmt.Sprintf("%d backends, %s", o.backends, lbName(o.lb))
	}
	env.Security = planSecurity(plan)
	if env.LoadAvg > float64(env.CPUs) {
		fmt.Fprintf(stderr, "leanbench: the machine is busy (load average %.1f on %d CPUs); ops/s and latency will be noisy\n", env.LoadAvg, env.CPUs)
	}
	r := &runner{opts: o, stdout: stdout, stderr: stderr, started: time.Now()}
	throughputRuns := 0
	for _, c := range plan {
		if c.workload != workloadIdle {
			throughputRuns++
		}
	}
	r.multiRun = throughputRuns*o.rounds > 1
	results := r.execute(plan, stacks)

	printReport(stdout, env, plan, stacks, results)
	if o.jsonPath != "" {
		f := &File{Env: env, Results: results}
		if err := writeJSON(o.jsonPath, f); err != nil {
			fmt.Fprintf(stderr, "leanbench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "leanbench: wrote %s\n", o.jsonPath)
	}
	if *chartPath != "" {
		if err := writeChart(*chartPath, newChartData(env, o, args, plan, stacks, results)); err != nil {
			fmt.Fprintf(stderr, "leanbench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "leanbench: wrote %s\n", *chartPath)
	}
	return 0
}

// quickSuite is what runs without workload flags: about two minutes with
// the default -benchtime, -warmup, -settle, -rounds and stacks. The idle
// workload runs twice, plaintext and over TLS, since what a TLS connection
// holds while idle (crypto/tls's state and buffers) is a cost of its own,
// paid on top of HTTP/2's by every deployment that runs TLS.
func quickSuite() []config {
	return []config{
		{workload: workloadUnary, reqSize: 100, respSize: 100, concurrency: 120, connections: 1},
		{workload: workloadStreaming, reqSize: 100, respSize: 100, concurrency: 120, connections: 1},
		{workload: workloadStreaming, reqSize: 1_000_000, respSize: 1_000_000, concurrency: 16, connections: 1},
		{workload: workloadUnary, reqSize: 100, respSize: 100, concurrency: 1, connections: 1},
		{workload: workloadIdle, connections: 2000}, // issue 6 measures at 2000,
		{workload: workloadIdle, connections: 2000, tls: true},
	}
}

func crossProduct(workloads, reqs, resps, concs, conns string) ([]config, error) {
	req, err := intList("reqSizeBytes", reqs, 0)
	if err != nil {
		return nil, err
	}
	resp, err := intList("respSizeBytes", resps, 0)
	if err != nil {
		return nil, err
	}
	conc, err := intList("maxConcurrentCalls", concs, 1)
	if err != nil {
		return nil, err
	}
	var cn []int
	if conns != "" {
		if cn, err = intList("connections", conns, 1); err != nil {
			return nil, err
		}
	}
	var plan []config
	for _, w := range strings.Split(workloads, ",") {
		w = strings.TrimSpace(w)
		switch w {
		case workloadIdle:
			n := cn
			if n == nil {
				n = []int{2000}
			}
			for _, c := range n {
				plan = append(plan, config{workload: w, connections: c})
			}
		case workloadUnary, workloadStreaming:
			n := cn
			if n == nil {
				n = []int{1}
			}
			for _, rq := range req {
				for _, rs := range resp {
					for _, cc := range conc {
						for _, c := range n {
							plan = append(plan, config{workload: w, reqSize: rq, respSize: rs, concurrency: cc, connections: c})
						}
					}
				}
			}
		case "":
		default:
			return nil, fmt.Errorf("unknown workload %q (want unary, streaming or idle)", w)
		}
	}
	if len(plan) == 0 {
		return nil, fmt.Errorf("no workloads")
	}
	return plan, nil
}

func intList(name, s string, min int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < min {
			return nil, fmt.Errorf("-%s: bad value %q (want an integer >= %d)", name, f, min)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-%s: empty list", name)
	}
	return out, nil
}

// estimate is the expected wall time of one run, for the progress line.
func (r *runner) estimate(c config) time.Duration {
	if c.workload == workloadIdle {
		return 2*r.opts.settle + time.Second + time.Duration(c.connections)*2*time.Millisecond
	}
	return r.opts.warmup + r.opts.benchtime + 300*time.Millisecond
}

// runs reports whether stack st has config c to run: raw has no idle
// connections to measure.
func runs(c config, st stack) bool {
	return c.workload != workloadIdle || st.name != stackRaw
}

// execute runs the plan: for each config, the rounds, and in each round
// every stack once, so that the stacks interleave. A stack that fails in a
// config is not run again in that config.
func (r *runner) execute(plan []config, stacks []stack) []Result {
	var left time.Duration
	total := 0
	for _, c := range plan {
		for _, st := range stacks {
			if !runs(c, st) {
				continue
			}
			left += time.Duration(r.opts.rounds) * r.estimate(c)
			total += r.opts.rounds
		}
	}
	var results []Result
	n := 0
	for _, c := range plan {
		failed := map[string]bool{}
		for round := 1; round <= r.opts.rounds; round++ {
			for _, st := range stacks {
				if !runs(c, st) {
					continue
				}
				n++
				est := r.estimate(c)
				if failed[st.name] {
					left -= est
					continue
				}
				r.progressf("[%d/%d, ~%v left] %-17s %s, round %d/%d", n, total, left.Round(time.Second), st.name, c, round, r.opts.rounds)
				var res Result
				if c.workload == workloadIdle {
					res = r.runIdle(st, c, round)
				} else {
					res = r.runThroughput(st, c, round)
				}
				left -= est
				if res.Error != "" {
					failed[st.name] = true
					r.progressf("    error: %s", res.Error)
				} else {
					r.progressf("    %s", progressSummary(res))
				}
				results = append(results, res)
			}
		}
	}
	r.progressf("leanbench: done in %v", time.Since(r.started).Round(100*time.Millisecond))
	return results
}

func progressSummary(res Result) string {
	if res.Figures != nil {
		f := res.Figures
		s := fmt.Sprintf("%.0f ops/s, %.1f µs CPU/op, %.1f allocs/op, %s B/op, p50 %s p99 %s",
			f.OpsPerSec, f.CPUMicrosPerOp, f.AllocsPerOp, compact(f.BytesPerOp), latencyLabel(f.Latency.P50), latencyLabel(f.Latency.P99))
		if large(res.Shape) {
			s += fmt.Sprintf(", %.1f MB/s", f.MBPerSec)
		}
		return s
	}
	if res.Server != nil && res.Client != nil {
		return fmt.Sprintf("server %s B/conn RSS (marginal %s), %.2f goroutines/conn; client %s B/conn RSS (marginal %s), %.2f goroutines/conn, opened in %s",
			compact(res.Server.RSSBytesPerConn), compact(res.Server.MarginalRSSBytesPerConn), res.Server.GoroutinesPerConn,
			compact(res.Client.RSSBytesPerConn), compact(res.Client.MarginalRSSBytesPerConn), res.Client.GoroutinesPerConn,
			openLabel(res.Client.OpenSeconds))
	}
	return ""
}

// waitGoroutines waits up to d for the number of goroutines to fall to n
// and returns how many more there are.
func waitGoroutines(n int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		left := runtime.NumGoroutine() - n
		if left <= 0 || time.Now().After(deadline) {
			return max(left, 0)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// profileBase is the suffix that profile files of one run get.
func (r *runner) profileBase(st stack, c config, round int) string {
	s := strings.ReplaceAll(st.name, ">", fileSuffix)
	if r.multiRun {
		s += "." + c.slug() + ".r" + strconv.Itoa(round)
	}
	return s
}

// withSuffix inserts "."+suffix before the extension of path.
func withSuffix(path, suffix string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "." + suffix + ext
}
