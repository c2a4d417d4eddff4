package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// summary is one stack's medians for one config.
type summary struct {
	rounds int    // successful rounds
	err    string // first error, if no round succeeded
	fig    Figures
	server IdleSide
	client IdleSide
}

func resultConfig(res Result) config {
	c := config{workload: res.Workload, connections: res.Connections, tls: res.TLS}
	if res.Shape != nil {
		c.reqSize, c.respSize, c.concurrency = res.ReqSize, res.RespSize, res.Concurrency
	}
	return c
}

// summarize groups results by config and stack and takes the median of
// each figure over the successful rounds.
func summarize(results []Result) map[config]map[string]*summary {
	type acc struct {
		err  string
		figs []*Figures
		srv  []*IdleSide
		cli  []*IdleSide
	}
	accs := map[config]map[string]*acc{}
	for _, res := range results {
		c := resultConfig(res)
		if accs[c] == nil {
			accs[c] = map[string]*acc{}
		}
		a := accs[c][res.Stack]
		if a == nil {
			a = &acc{}
			accs[c][res.Stack] = a
		}
		switch {
		case res.Error != "":
			if a.err == "" {
				a.err = res.Error
			}
		case res.Figures != nil:
			a.figs = append(a.figs, res.Figures)
		case res.Server != nil && res.Client != nil:
			a.srv = append(a.srv, res.Server)
			a.cli = append(a.cli, res.Client)
		}
	}
	out := map[config]map[string]*summary{}
	for c, byStack := range accs {
		out[c] = map[string]*summary{}
		for name, a := range byStack {
			s := &summary{err: a.err}
			if len(a.figs) > 0 {
				s.rounds = len(a.figs)
				s.fig = medianFigures(a.figs)
			}
			if len(a.srv) > 0 {
				s.rounds = len(a.srv)
				s.server = medianIdle(a.srv)
				s.client = medianIdle(a.cli)
			}
			out[c][name] = s
		}
	}
	return out
}

func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	return median(v)
}

func medianFigures(fs []*Figures) Figures {
	return Figures{
		Seconds:        medianOf(fs, func(f *Figures) float64 { return f.Seconds }),
		Ops:            int64(medianOf(fs, func(f *Figures) float64 { return float64(f.Ops) })),
		OpsPerSec:      medianOf(fs, func(f *Figures) float64 { return f.OpsPerSec }),
		AllocsPerOp:    medianOf(fs, func(f *Figures) float64 { return f.AllocsPerOp }),
		BytesPerOp:     medianOf(fs, func(f *Figures) float64 { return f.BytesPerOp }),
		CPUMicrosPerOp: medianOf(fs, func(f *Figures) float64 { return f.CPUMicrosPerOp }),
		MBPerSec:       medianOf(fs, func(f *Figures) float64 { return f.MBPerSec }),
		Latency: Latency{
			P50:  medianOf(fs, func(f *Figures) float64 { return f.Latency.P50 }),
			P90:  medianOf(fs, func(f *Figures) float64 { return f.Latency.P90 }),
			P99:  medianOf(fs, func(f *Figures) float64 { return f.Latency.P99 }),
			Max:  medianOf(fs, func(f *Figures) float64 { return f.Latency.Max }),
			Mean: medianOf(fs, func(f *Figures) float64 { return f.Latency.Mean }),
		},
	}
}

func medianIdle(xs []*IdleSide) IdleSide {
	return IdleSide{
		RSSBytesPerConn:         medianOf(xs, func(x *IdleSide) float64 { return x.RSSBytesPerConn }),
		MarginalRSSBytesPerConn: medianOf(xs, func(x *IdleSide) float64 { return x.MarginalRSSBytesPerConn }),
		RSSBytes:                int64(medianOf(xs, func(x *IdleSide) float64 { return float64(x.RSSBytes) })),
		HeapBytesPerConn:        medianOf(xs, func(x *IdleSide) float64 { return x.HeapBytesPerConn }),
		StackBytesPerConn:       medianOf(xs, func(x *IdleSide) float64 { return x.StackBytesPerConn }),
		GoroutinesPerConn:       medianOf(xs, func(x *IdleSide) float64 { return x.GoroutinesPerConn }),
		BaselineRSSBytes:        int64(medianOf(xs, func(x *IdleSide) float64 { return float64(x.BaselineRSSBytes) })),
		BaselineGoroutines:      int(medianOf(xs, func(x *IdleSide) float64 { return float64(x.BaselineGoroutines) })),
		OpenSeconds:             medianOf(xs, func(x *IdleSide) float64 { return x.OpenSeconds }),
	}
}

// footnotes numbers distinct errors so that a table cell can refer to them.
type footnotes struct {
	lines []string
	index map[string]int
}

func (f *footnotes) ref(stackName string, c config, err string) string {
	if f.index == nil {
		f.index = map[string]int{}
	}
	key := stackName + "\x00" + err
	n, ok := f.index[key]
	if !ok {
		n = len(f.lines) + 1
		f.index[key] = n
		f.lines = append(f.lines, fmt.Sprintf("[%d] %s (first in %s): error: %s", n, stackName, c, err))
	}
	return fmt.Sprintf("error[%d]", n)
}

// headerLine describes the machine, the build and the time of a run, as
// the report's first line and the title of -chart's chart say it.
func (e Env) headerLine() string {
	return fmt.Sprintf("%s %s/%s, %d CPUs (GOMAXPROCS %d), load average %.1f at start, grpc-go %s, leangrpc %s, %s, %s",
		e.Go, e.GOOS, e.GOARCH, e.CPUs, e.GOMAXPROCS, e.LoadAvg, e.GrpcGo, e.Leangrpc, e.securityLabel(), e.Time)
}

// printReport writes the results tables: one for the throughput workloads,
// one for idle, each with one row per config.
func printReport(w io.Writer, env Env, plan []config, stacks []stack, results []Result) {
	fmt.Fprintf(w, "leanbench: %s\n", env.headerLine())
	if env.Compression != "" {
		fmt.Fprintf(w, "compression: %s (every client's calls, grpc.UseCompressor; the servers answer in kind)\n", env.Compression)
	}
	if env.Balancing != "" {
		fmt.Fprintf(w, "balancing: %s (each client channel spreads its calls over the servers; see -backends)\n", env.Balancing)
	}
	if env.LoadAvg > float64(env.CPUs) {
		fmt.Fprintln(w, "note: the machine was busy (load average above the CPU count): ops/s and latency are noisy; CPU/op, allocs/op and ratios less so.")
	}
	fmt.Fprintln(w)
	sums := summarize(results)
	var tput, idle []config
	seen := map[config]bool{}
	for _, c := range plan {
		if seen[c] {
			continue
		}
		seen[c] = true
		if c.workload == workloadIdle {
			idle = append(idle, c)
		} else {
			tput = append(tput, c)
		}
	}
	names := make([]string, len(stacks))
	var baselines []string
	for i, st := range stacks {
		names[i] = st.name
		if st.client.exe != "" {
			baselines = append(baselines, st.name)
		}
	}
	ratios := ratioPairsOf(names, baselines)
	var notes footnotes
	if len(tput) > 0 {
		printThroughput(w, tput, names, ratios, sums, &notes)
	}
	if len(idle) > 0 {
		if len(tput) > 0 {
			fmt.Fprintln(w)
		}
		// raw has no idle connections: it has no column there.
		idleNames := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == stackRaw })
		idleRatios := slices.DeleteFunc(slices.Clone(ratios), func(p ratioPair) bool { return p.den == stackRaw })
		printIdle(w, idle, idleNames, idleRatios, sums, &notes)
	}
	fmt.Fprintln(w)
	const better = "(ops/s: above 1 is better; CPU, allocs, latency, bytes: below 1 is better)"
	switch len(ratios) {
	case 0:
	case 1:
		fmt.Fprintf(w, "ratio = %s/%s %s.\n", ratios[0].num, ratios[0].den, better)
	default:
		fmt.Fprintf(w, "Each ratio group is its title's quotient %s.\n", better)
	}
	fmt.Fprintln(w, "Medians over the rounds. Allocations, B/op and CPU are process-wide: client and server together.")
	for _, l := range notes.lines {
		fmt.Fprintln(w, l)
	}
}

func printThroughput(w io.Writer, cfgs []config, names []string, ratios []ratioPair, sums map[config]map[string]*summary, notes *footnotes) {
	showMB := false
	for _, c := range cfgs {
		showMB = showMB || large(&Shape{ReqSize: c.reqSize, RespSize: c.respSize})
	}
	cols := []string{"ops/s", "CPU µs/op", "allocs/op", "B/op", "p50", "p99"}
	if showMB {
		cols = append(cols, "MB/s")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	ratioCols := []string{"ops/s", "CPU", "allocs", "p50"}
	writeHeader(tw, []string{"workload", "req/resp", "calls", "conns"}, names, cols, ratios, ratioCols)
	for _, c := range cfgs {
		row := []string{c.workloadLabel(), sizeLabel(c.reqSize) + "/" + sizeLabel(c.respSize), fmt.Sprint(c.concurrency), fmt.Sprint(c.connections)}
		for _, n := range names {
			s := sums[c][n]
			switch {
			case s == nil:
				row = append(row, repeat("-", len(cols))...)
			case s.rounds == 0:
				row = append(row, notes.ref(n, c, s.err))
				row = append(row, repeat("-", len(cols)-1)...)
			default:
				f := s.fig
				row = append(row,
					fmt.Sprintf("%.0f", f.OpsPerSec),
					fmt.Sprintf("%.1f", f.CPUMicrosPerOp),
					fmt.Sprintf("%.1f", f.AllocsPerOp),
					fmt.Sprintf("%.0f", f.BytesPerOp),
					latencyLabel(f.Latency.P50),
					latencyLabel(f.Latency.P99))
				if showMB {
					if large(&Shape{ReqSize: c.reqSize, RespSize: c.respSize}) {
						row = append(row, fmt.Sprintf("%.1f", f.MBPerSec))
					} else {
						row = append(row, "-")
					}
				}
			}
		}
		for _, p := range ratios {
			l, g := sums[c][p.num], sums[c][p.den]
			if l != nil && g != nil && l.rounds > 0 && g.rounds > 0 {
				row = append(row,
					ratio(l.fig.OpsPerSec, g.fig.OpsPerSec),
					ratio(l.fig.CPUMicrosPerOp, g.fig.CPUMicrosPerOp),
					ratio(l.fig.AllocsPerOp, g.fig.AllocsPerOp),
					ratio(l.fig.Latency.P50, g.fig.Latency.P50))
			} else {
				row = append(row, repeat("-", len(ratioCols))...)
			}
		}
		writeRow(tw, row)
	}
	tw.Flush()
}

func printIdle(w io.Writer, cfgs []config, names []string, ratios []ratioPair, sums map[config]map[string]*summary, notes *footnotes) {
	// "open" is the client's time to open the connections, each with its
	// one RPC.
	cols := []string{"srv RSS/conn", "srv marginal", "srv heap/conn", "srv stack/conn", "srv gor/conn", "cli RSS/conn", "cli marginal", "cli gor/conn", "open"}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	ratioCols := []string{"srv RSS", "srv marg", "srv gor", "cli RSS", "cli marg", "cli gor", "open"}
	writeHeader(tw, []string{"workload", "conns"}, names, cols, ratios, ratioCols)
	for _, c := range cfgs {
		row := []string{c.workloadLabel(), fmt.Sprint(c.connections)}
		for _, n := range names {
			s := sums[c][n]
			switch {
			case s == nil:
				row = append(row, repeat("-", len(cols))...)
			case s.rounds == 0:
				row = append(row, notes.ref(n, c, s.err))
				row = append(row, repeat("-", len(cols)-1)...)
			default:
				row = append(row,
					fmt.Sprintf("%.0f", s.server.RSSBytesPerConn),
					fmt.Sprintf("%.0f", s.server.MarginalRSSBytesPerConn),
					fmt.Sprintf("%.0f", s.server.HeapBytesPerConn),
					fmt.Sprintf("%.0f", s.server.StackBytesPerConn),
					fmt.Sprintf("%.2f", s.server.GoroutinesPerConn),
					fmt.Sprintf("%.0f", s.client.RSSBytesPerConn),
					fmt.Sprintf("%.0f", s.client.MarginalRSSBytesPerConn),
					fmt.Sprintf("%.2f", s.client.GoroutinesPerConn),
					openLabel(s.client.OpenSeconds))
			}
		}
		for _, p := range ratios {
			l, g := sums[c][p.num], sums[c][p.den]
			if l != nil && g != nil && l.rounds > 0 && g.rounds > 0 {
				row = append(row,
					ratio(l.server.RSSBytesPerConn, g.server.RSSBytesPerConn),
					ratio(l.server.MarginalRSSBytesPerConn, g.server.MarginalRSSBytesPerConn),
					ratio(l.server.GoroutinesPerConn, g.server.GoroutinesPerConn),
					ratio(l.client.RSSBytesPerConn, g.client.RSSBytesPerConn),
					ratio(l.client.MarginalRSSBytesPerConn, g.client.MarginalRSSBytesPerConn),
					ratio(l.client.GoroutinesPerConn, g.client.GoroutinesPerConn),
					ratio(l.client.OpenSeconds, g.client.OpenSeconds))
			} else {
				row = append(row, repeat("-", len(ratioCols))...)
			}
		}
		writeRow(tw, row)
	}
	tw.Flush()
}

// openLabel writes the idle client's open time; "-" for results from a
// leanbench that did not measure it (a -baseline binary, say).
func openLabel(seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return latencyLabel(seconds * 1e6)
}

func writeRow(w io.Writer, cells []string) {
	fmt.Fprintln(w, strings.Join(cells, "\t")+"\t")
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func ratio(a, b float64) string {
	if b < 0.005 {
		// Nothing to compare with (raw allocates nothing per op).
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// large reports whether a shape moves messages big enough for MB/s to be
// the interesting figure.
func large(s *Shape) bool {
	return s != nil && max(s.ReqSize, s.RespSize) >= 64<<10
}

// sizeLabel writes a byte count the way the suite names it: 100B, 10kB,
// 1MB, 64KiB.
func sizeLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dMB", n/1_000_000)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dkB", n/1000)
	case n >= 1024 && n%1024 == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// latencyLabel writes microseconds with a unit that keeps 3 digits.
func latencyLabel(us float64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.2fms", us/1000)
	}
	return fmt.Sprintf("%.2fs", us/1e6)
}

// compact writes a count with a k or M suffix (powers of 1000).
func compact(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// writeHeader writes a table's two header rows: the stack names over their
// groups of columns, then the column names, with a group of ratioCols last
// for each of ratios.
func writeHeader(tw *tabwriter.Writer, lead, names, cols []string, ratios []ratioPair, ratioCols []string) {
	h1 := make([]string, len(lead))
	h2 := append([]string(nil), lead...)
	group := func(title string, cols []string) {
		for i, col := range cols {
			if i == 0 {
				h1 = append(h1, title)
			} else {
				h1 = append(h1, "")
			}
			h2 = append(h2, col)
		}
	}
	for _, n := range names {
		group(n, cols)
	}
	for _, p := range ratios {
		group(p.title(len(ratios)), ratioCols)
	}
	writeRow(tw, h1)
	writeRow(tw, h2)
}

// ratioPair names two stacks whose ratio the tables show.
type ratioPair struct{ num, den string }

// title is the pair's column group title among n pairs: "ratio" when it is
// the only one.
func (p ratioPair) title(n int) string {
	if n == 1 {
		return "ratio"
	}
	return p.num + "/" + p.den
}

// ratioPairsOf returns the ratios the tables show: leangrpc over grpc-go
// when both ran, and then each of baselines (-baseline's stacks) over
// grpc-go, so that two builds compare by their ratios against the same
// grpc-go runs, and leangrpc over raw (the floor) when raw ran; otherwise
// the first over the second of exactly two stacks (leangrpc over
// leangrpc-nopool, or over a baseline, say).
func ratioPairsOf(names, baselines []string) []ratioPair {
	hasLean := slices.Contains(names, stackLean)
	hasGrpc := slices.Contains(names, stackGrpc)
	hasRaw := slices.Contains(names, stackRaw)
	switch {
	case hasLean && hasGrpc:
		out := []ratioPair{{stackLean, stackGrpc}}
		for _, b := range baselines {
			out = append(out, ratioPair{b, stackGrpc})
		}
		if hasRaw {
			out = append(out, ratioPair{stackLean, stackRaw})
		}
		return out
	case len(names) == 2:
		return []ratioPair{{names[0], names[1]}}
	}
	return nil
}
