package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// -chart runs one workload over a ladder of message sizes and draws what
// the table shows as two panels, throughput and CPU per MB against size
// (chart_svg.go draws them). The workload is streaming ping-pong with
// chartStreams streams in flight on one connection, request and response
// of the same size: the shape of the quick suite's large row, so that the
// chart shows where each stack leaves the floor (raw) as messages grow.

// chartStreams is the number of streams in flight at every size.
const chartStreams = 16

// chartLadder is the chart's message sizes, from 1 KiB to 16 MiB by
// factors of four.
var chartLadder = []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}

// chartPlan returns -chart's configs, smallest message first. set holds
// the names of the flags given on the command line: -reqSizeBytes
// replaces the ladder (each size is the request's and the response's),
// and the other shaping flags are refused, since the chart sets them.
func chartPlan(set map[string]bool, reqSizes string) ([]config, error) {
	for _, name := range []string{"workloads", "respSizeBytes", "maxConcurrentCalls", "connections"} {
		if set[name] {
			return nil, fmt.Errorf("-chart runs streaming with %d streams, request size = response size: -%s does not apply (-reqSizeBytes replaces the ladder of sizes)", chartStreams, name)
		}
	}
	sizes := chartLadder
	if set["reqSizeBytes"] {
		var err error
		if sizes, err = intList("reqSizeBytes", reqSizes, 1); err != nil {
			return nil, err
		}
		top := chartLadder[len(chartLadder)-1]
		for _, n := range sizes {
			if n > top {
				// Every stream holds several copies of its message at
				// once; the ladder's top is what we have checked.
				return nil, fmt.Errorf("-chart: -reqSizeBytes %d is above %s, the ladder's top", n, chartSizeLabel(top))
			}
		}
		slices.Sort(sizes)
		sizes = slices.Compact(sizes)
	}
	plan := make([]config, len(sizes))
	for i, n := range sizes {
		plan[i] = config{workload: workloadStreaming, reqSize: n, respSize: n, concurrency: chartStreams, connections: 1}
	}
	return plan, nil
}

// checkChartPath fails early, before the runs, when path's directory does
// not exist.
func checkChartPath(path string) error {
	fi, err := os.Stat(filepath.Dir(path))
	if err == nil && !fi.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		return fmt.Errorf("-chart %s: %w", path, err)
	}
	return nil
}

// chartData is what a chart shows: for each stack and message size, the
// medians over the rounds that the table shows.
type chartData struct {
	title   string // what ran
	machine string // Env.headerLine
	detail  string // how it ran
	sizes   []int  // the x axis, ascending
	series  []chartSeries
	notes   []string // footnote lines, the command line last
}

// chartSeries is one stack's line in each panel.
type chartSeries struct {
	name string
	// mbPerSec is the median MB/s at each of chartData.sizes: request and
	// response payload bytes, 10^6 to the MB, as Figures.MBPerSec counts
	// them. 0 where the stack has no result.
	mbPerSec []float64
	// cpuPerMB is the median process CPU (user + system, client and
	// server) per MB of that payload, in µs; 0 where there is no result.
	cpuPerMB []float64
}

// newChartData takes the chart's points from the same medians as the
// table (summarize): a run is measured once and shown twice. args is the
// command line without the program's name.
func newChartData(env Env, o options, args []string, plan []config, stacks []stack, results []Result) *chartData {
	d := &chartData{
		title:   fmt.Sprintf("leanbench: streaming, %d streams in flight, request size = response size", chartStreams),
		machine: env.headerLine(),
		detail: fmt.Sprintf("medians of %s of %v (+%v warmup); the gRPC stacks' streams share one connection, raw has one per stream",
			plural(o.rounds, "round"), o.benchtime, o.warmup),
	}
	if env.Compression != "" {
		d.detail += "; compression " + env.Compression
	}
	if env.Balancing != "" {
		d.detail += "; " + env.Balancing
	}
	for _, c := range plan {
		d.sizes = append(d.sizes, c.reqSize)
	}
	sums := summarize(results)
	var missing []string
	for _, st := range stacks {
		s := chartSeries{name: st.name, mbPerSec: make([]float64, len(plan)), cpuPerMB: make([]float64, len(plan))}
		var gaps []string
		for i, c := range plan {
			sum := sums[c][st.name]
			if sum == nil || sum.rounds == 0 {
				gaps = append(gaps, chartSizeLabel(c.reqSize))
				continue
			}
			s.mbPerSec[i] = sum.fig.MBPerSec
			// Bytes per op are the same in every round, so this is the
			// median of the rounds' CPU per MB.
			s.cpuPerMB[i] = sum.fig.CPUMicrosPerOp / (float64(c.reqSize+c.respSize) / 1e6)
		}
		if len(gaps) > 0 {
			missing = append(missing, st.name+" at "+strings.Join(gaps, ", "))
		}
		d.series = append(d.series, s)
	}
	d.notes = append(d.notes, "MB/s counts request and response payload bytes (1 MB = 10⁶ B). CPU is user + system time of the whole process, client and server together.")
	if len(missing) > 0 {
		d.notes = append(d.notes, "No result (see the table's error notes): "+strings.Join(missing, "; ")+".")
	}
	d.notes = append(d.notes, "Made by: "+commandLine(args))
	return d
}

// writeChart writes d to path as SVG.
func writeChart(path string, d *chartData) error {
	var b strings.Builder
	d.writeSVG(&b)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// commandLine writes leanbench's arguments as a shell would take them.
func commandLine(args []string) string {
	out := []string{"leanbench"}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`><|&;()*?[]{}~#!") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

// plural writes n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// chartSizeLabel names a message size on the chart's axis: 1 KiB, 16 MiB.
func chartSizeLabel(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return sizeLabel(n)
}
