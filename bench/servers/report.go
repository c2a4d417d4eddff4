package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// median returns the median of xs (the mean of the middle two for an
// even count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// serverSummary is one server's medians over the successful rounds.
type serverSummary struct {
	rounds, idleRounds int
	reqPerSec          float64
	cpuPerReq          float64 // µs
	clientCPUPerReq    float64 // µs, h2load's
	switchesPerReq     float64
	idlePerConn        float64 // bytes
}

func summarize(runs []runResult, idle []idleResult) map[string]serverSummary {
	type acc struct{ rps, cpu, client, sw, idle []float64 }
	accs := map[string]*acc{}
	get := func(s string) *acc {
		if accs[s] == nil {
			accs[s] = &acc{}
		}
		return accs[s]
	}
	for _, r := range runs {
		if r.err == nil {
			a := get(r.server)
			a.rps = append(a.rps, r.reqPerSec)
			a.cpu = append(a.cpu, r.cpuPerRequest())
			a.client = append(a.client, r.clientCPUPerRequest())
			a.sw = append(a.sw, r.switchesPerRequest())
		}
	}
	for _, r := range idle {
		if r.err == nil {
			a := get(r.server)
			a.idle = append(a.idle, r.perConn())
		}
	}
	out := map[string]serverSummary{}
	for s, a := range accs {
		out[s] = serverSummary{
			rounds: len(a.rps), idleRounds: len(a.idle),
			reqPerSec: median(a.rps), cpuPerReq: median(a.cpu), clientCPUPerReq: median(a.client),
			switchesPerReq: median(a.sw), idlePerConn: median(a.idle),
		}
	}
	return out
}

// writeReport prints the medians as a Markdown table, then leangrpc's
// ratios to the other servers.
func writeReport(w io.Writer, servers []string, runs []runResult, idle []idleResult) {
	sum := summarize(runs, idle)
	fmt.Fprintln(w, "| server | h2load req/s (median) | server CPU-µs per request | server context switches per request | h2load CPU-µs per request | idle RSS per connection | rounds |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, s := range servers {
		m, ok := sum[s]
		if !ok {
			fmt.Fprintf(w, "| %s | failed | | | | | 0 |\n", s)
			continue
		}
		load := []string{"failed", "", "", ""}
		if m.rounds > 0 {
			load = []string{fmt.Sprintf("%.0f", m.reqPerSec), fmt.Sprintf("%.1f", m.cpuPerReq),
				fmt.Sprintf("%.2f", m.switchesPerReq), fmt.Sprintf("%.1f", m.clientCPUPerReq)}
		}
		rss := "-"
		if !isGRPCServer(s) {
			rss = "—" // the idle connections are gRPC clients'
		} else if m.idleRounds > 0 {
			rss = fmt.Sprintf("%.1f KB", m.idlePerConn/1000)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d |\n", s, strings.Join(load, " | "), rss, m.rounds)
	}
	writeRatios(w, sum, true)
}

// writeStreamReport prints the streaming shape's medians.
func writeStreamReport(w io.Writer, servers []string, runs []runResult) {
	sum := summarize(runs, nil)
	fmt.Fprintln(w, "| server (streaming) | messages/s (median) | server CPU-µs per message | server context switches per message | client CPU-µs per message | rounds |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, s := range servers {
		m, ok := sum[s]
		if !ok || m.rounds == 0 {
			fmt.Fprintf(w, "| %s | failed | | | | 0 |\n", s)
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f | %.1f | %.2f | %.1f | %d |\n",
			s, m.reqPerSec, m.cpuPerReq, m.switchesPerReq, m.clientCPUPerReq, m.rounds)
	}
	writeRatios(w, sum, false)
}

// writeRatios prints leangrpc's ratios to the other servers; the one to
// nghttpd, the floor, says what leangrpc costs over HTTP/2 alone.
func writeRatios(w io.Writer, sum map[string]serverSummary, withIdle bool) {
	lean, ok := sum[serverLeangrpc]
	if !ok || lean.rounds == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, other := range []string{serverTonic, serverGrpcGo, serverNghttpd} {
		o, ok := sum[other]
		if !ok || o.rounds == 0 {
			continue
		}
		u := unit(withIdle)
		line := fmt.Sprintf("leangrpc/%s: %s %.2fx, CPU per %s %.2fx, context switches per %s %.2fx",
			other, unitRate(withIdle), lean.reqPerSec/o.reqPerSec, u, ratio(lean.cpuPerReq, o.cpuPerReq), u, ratio(lean.switchesPerReq, o.switchesPerReq))
		if withIdle && lean.idleRounds > 0 && o.idleRounds > 0 {
			line += fmt.Sprintf(", idle RSS per connection %.2fx", ratio(lean.idlePerConn, o.idlePerConn))
		}
		fmt.Fprintln(w, line)
	}
}

func unit(unary bool) string {
	if unary {
		return "request"
	}
	return "message"
}

func unitRate(unary bool) string {
	if unary {
		return "req/s"
	}
	return "messages/s"
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// writeStrace prints a strace run's syscalls per request.
func writeStrace(w io.Writer, r runResult) {
	if r.err != nil {
		fmt.Fprintln(w, r.line())
		return
	}
	var total int64
	for _, c := range r.syscalls {
		total += c.calls
	}
	n := float64(r.requests)
	fmt.Fprintf(w, "%-8s %.2f syscalls/request over %d requests (%.0f req/s under strace):", r.server, float64(total)/n, r.requests, r.reqPerSec)
	for i, c := range r.syscalls {
		if i == 6 {
			break
		}
		fmt.Fprintf(w, " %s %.3f", c.name, float64(c.calls)/n)
	}
	fmt.Fprintln(w)
}
