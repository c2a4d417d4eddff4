package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// runCompare implements "leanbench compare OLD.json NEW.json": for every
// stack and config present in both files, the medians before and after and
// the change in percent, as grpc-go's benchresult prints them.
func runCompare(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "usage: leanbench compare OLD.json NEW.json")
		return 2
	}
	oldF, err := readJSON(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "leanbench compare: %v\n", err)
		return 1
	}
	newF, err := readJSON(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "leanbench compare: %v\n", err)
		return 1
	}
	printCompare(stdout, oldF, newF)
	return 0
}

type runKey struct {
	stack string
	cfg   config
}

// orderedKeys lists the (stack, config) pairs of results in first-seen
// order.
func orderedKeys(results []Result) []runKey {
	var keys []runKey
	seen := map[runKey]bool{}
	for _, res := range results {
		k := runKey{res.Stack, resultConfig(res)}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func printCompare(w io.Writer, oldF, newF *File) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	writeRow(tw, []string{"", "Before", "After"})
	writeRow(tw, []string{"go", oldF.Env.Go, newF.Env.Go})
	writeRow(tw, []string{"grpc-go", oldF.Env.GrpcGo, newF.Env.GrpcGo})
	writeRow(tw, []string{"leangrpc", oldF.Env.Leangrpc, newF.Env.Leangrpc})
	writeRow(tw, []string{"cpus", fmt.Sprint(oldF.Env.CPUs), fmt.Sprint(newF.Env.CPUs)})
	writeRow(tw, []string{"load average", fmt.Sprintf("%.1f", oldF.Env.LoadAvg), fmt.Sprintf("%.1f", newF.Env.LoadAvg)})
	writeRow(tw, []string{"security", oldF.Env.securityLabel(), newF.Env.securityLabel()})
	writeRow(tw, []string{"time", oldF.Env.Time, newF.Env.Time})
	tw.Flush()

	oldS, newS := summarize(oldF.Results), summarize(newF.Results)
	oldKeys := orderedKeys(oldF.Results)
	newKeys := orderedKeys(newF.Results)
	inOld := map[runKey]bool{}
	for _, k := range oldKeys {
		inOld[k] = true
	}
	var onlyNew, onlyOld []runKey
	for _, k := range newKeys {
		if !inOld[k] {
			onlyNew = append(onlyNew, k)
			continue
		}
		o, n := oldS[k.cfg][k.stack], newS[k.cfg][k.stack]
		fmt.Fprintf(w, "\n%s  %s\n", k.stack, k.cfg)
		printCompareBlock(w, k.cfg, o, n)
	}
	inNew := map[runKey]bool{}
	for _, k := range newKeys {
		inNew[k] = true
	}
	for _, k := range oldKeys {
		if !inNew[k] {
			onlyOld = append(onlyOld, k)
		}
	}
	for _, k := range onlyOld {
		fmt.Fprintf(w, "\nonly in OLD: %s  %s\n", k.stack, k.cfg)
	}
	for _, k := range onlyNew {
		fmt.Fprintf(w, "\nonly in NEW: %s  %s\n", k.stack, k.cfg)
	}
}

type metric struct {
	title string
	get   func(*summary) float64
	fmt   string
}

var throughputMetrics = []metric{
	{"ops/s", func(s *summary) float64 { return s.fig.OpsPerSec }, "%.1f"},
	{"CPU µs/op", func(s *summary) float64 { return s.fig.CPUMicrosPerOp }, "%.2f"},
	{"allocs/op", func(s *summary) float64 { return s.fig.AllocsPerOp }, "%.2f"},
	{"B/op", func(s *summary) float64 { return s.fig.BytesPerOp }, "%.1f"},
	{"p50 µs", func(s *summary) float64 { return s.fig.Latency.P50 }, "%.1f"},
	{"p90 µs", func(s *summary) float64 { return s.fig.Latency.P90 }, "%.1f"},
	{"p99 µs", func(s *summary) float64 { return s.fig.Latency.P99 }, "%.1f"},
	{"max µs", func(s *summary) float64 { return s.fig.Latency.Max }, "%.1f"},
}

var mbMetric = metric{"MB/s", func(s *summary) float64 { return s.fig.MBPerSec }, "%.1f"}

var idleMetrics = []metric{
	{"server RSS B/conn", func(s *summary) float64 { return s.server.RSSBytesPerConn }, "%.0f"},
	{"server marginal RSS B/conn", func(s *summary) float64 { return s.server.MarginalRSSBytesPerConn }, "%.0f"},
	{"server heap B/conn", func(s *summary) float64 { return s.server.HeapBytesPerConn }, "%.0f"},
	{"server stack B/conn", func(s *summary) float64 { return s.server.StackBytesPerConn }, "%.0f"},
	{"server goroutines/conn", func(s *summary) float64 { return s.server.GoroutinesPerConn }, "%.2f"},
	{"client RSS B/conn", func(s *summary) float64 { return s.client.RSSBytesPerConn }, "%.0f"},
	{"client marginal RSS B/conn", func(s *summary) float64 { return s.client.MarginalRSSBytesPerConn }, "%.0f"},
	{"client heap B/conn", func(s *summary) float64 { return s.client.HeapBytesPerConn }, "%.0f"},
	{"client stack B/conn", func(s *summary) float64 { return s.client.StackBytesPerConn }, "%.0f"},
	{"client goroutines/conn", func(s *summary) float64 { return s.client.GoroutinesPerConn }, "%.2f"},
	{"client open s", func(s *summary) float64 { return s.client.OpenSeconds }, "%.2f"},
}

func printCompareBlock(w io.Writer, c config, o, n *summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	defer tw.Flush()
	writeRow(tw, []string{"Title", "Before", "After", "Percentage"})
	if o.rounds == 0 || n.rounds == 0 {
		writeRow(tw, []string{"status", status(o), status(n), ""})
		return
	}
	ms := throughputMetrics
	if c.workload == workloadIdle {
		ms = idleMetrics
	} else if large(&Shape{ReqSize: c.reqSize, RespSize: c.respSize}) {
		ms = append(ms[:len(ms):len(ms)], mbMetric)
	}
	for _, m := range ms {
		a, b := m.get(o), m.get(n)
		writeRow(tw, []string{m.title, fmt.Sprintf(m.fmt, a), fmt.Sprintf(m.fmt, b), percentChange(a, b)})
	}
	writeRow(tw, []string{"rounds", fmt.Sprint(o.rounds), fmt.Sprint(n.rounds), ""})
}

func status(s *summary) string {
	if s.rounds == 0 {
		return "error: " + s.err
	}
	return "ok"
}

// percentChange is (after-before)/before in percent, with a sign.
func percentChange(before, after float64) string {
	if before == 0 {
		if after == 0 {
			return "0.00%"
		}
		return "n/a"
	}
	p := (after - before) / math.Abs(before) * 100
	return fmt.Sprintf("%+.2f%%", p)
}
