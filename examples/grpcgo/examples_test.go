package grpcgo

import (
	"regexp"
	"sort"
	"strings"
	"time"
)

// distinct returns the sorted distinct lines: for output whose order or
// counts depend on timing (round robin's first pick, which backend is
// ready first, how many tries a loop needs), what is compared is which
// lines occur at all.
func distinct(lines []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range lines {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// distinctAfter keeps the lines up to and including the first that
// contains marker as they are, and the rest as distinct.
func distinctAfter(marker string) func([]string) []string {
	return func(lines []string) []string {
		for i, l := range lines {
			if strings.Contains(l, marker) {
				return append(append([]string(nil), lines[:i+1]...), distinct(lines[i+1:])...)
			}
		}
		return lines
	}
}

// backendsAfter is distinctAfter with every "(from :PORT)" after the
// marker read as one backend.
func backendsAfter(marker string) func([]string) []string {
	from := regexp.MustCompile(`\(from :\d+\)`)
	return func(lines []string) []string {
		for i, l := range lines {
			if strings.Contains(l, marker) {
				rest := make([]string, 0, len(lines)-i-1)
				for _, r := range lines[i+1:] {
					rest = append(rest, from.ReplaceAllString(r, "(from a backend)"))
				}
				return append(append([]string(nil), lines[:i+1]...), distinct(rest)...)
			}
		}
		return lines
	}
}

func countLines(out string, re *regexp.Regexp) int { return len(re.FindAllStringIndex(out, -1)) }

// callThenConnEvents returns the call's events in their order, without
// DelayedPickComplete, then the connection's in theirs (see the
// stats_monitoring example).
func callThenConnEvents(events []string) []string {
	var call, conn []string
	for _, e := range events {
		switch {
		case strings.HasPrefix(e, "TagConn ") || strings.HasPrefix(e, "HandleConn "):
			conn = append(conn, e)
		case e != "HandleRPC *stats.DelayedPickComplete":
			call = append(call, e)
		}
	}
	return append(call, conn...)
}

var (
	perCallLoad = regexp.MustCompile(`Per-call load report received`)
	oobLoad     = regexp.MustCompile(`Out-of-band load report received`)
	statsEvent  = regexp.MustCompile(`\[(TagConn|HandleConn|TagRPC|HandleRPC)\] \[([^\]]+)\]`)
)

var examples = []*example{
	{
		// A stats handler on both ends that logs every event; the client
		// makes one call and exits. What is compared is the client's
		// events by kind (their fields hold times, ports and sizes): the
		// call's in order, and the connection's in order. How the two
		// interleave, and whether the pick waited for the connection
		// (DelayedPickComplete), depends on whether the dial, on another
		// goroutine, wins the race with the call's first steps; grpc-go at
		// both ends shows either outcome from run to run.
		name: "stats_monitoring", server: "server", client: "client",
		servers:    [][]string{{"-port={port}"}},
		ready:      []string{"tcp:127.0.0.1:{port}"},
		clientArgs: []string{"-addr=localhost:{port}"},
		normalise: func(lines []string) []string {
			var out []string
			for _, l := range lines {
				if m := statsEvent.FindStringSubmatch(l); m != nil {
					out = append(out, m[1]+" "+m[2])
				} else if strings.Contains(l, "RPC response:") {
					out = append(out, l)
				}
			}
			return callThenConnEvents(out)
		},
	},
	{
		// ORCA load reports per call, in the trailers (the server's
		// orca.CallMetricsServerOption), which the client's own balancer
		// hears in its picker's Done. The example also asks for reports
		// out of band; grpc-go at both ends prints none within a run here,
		// so those lines are left out of the comparison.
		name: "orca", server: "server", client: "client",
		servers:    [][]string{{"-port={port}"}},
		ready:      []string{"tcp:127.0.0.1:{port}"},
		clientArgs: []string{"-addr=localhost:{port}"},
		done: func(out string, ran time.Duration) bool {
			return countLines(out, perCallLoad) >= 3
		},
		normalise: func(lines []string) []string {
			var out []string
			for _, l := range lines {
				if !oobLoad.MatchString(l) {
					out = append(out, l)
				}
			}
			return distinct(out)
		},
		gap: func(p pairing) string {
			if p.leanServer {
				return "leangrpc.NewServer takes leangrpc's ServerOptions, not orca.CallMetricsServerOption (a grpc.ServerOption)"
			}
			return ""
		},
	},
	{
		// Two servers on :50051 and :50052; pick_first then round_robin
		// through a resolver of the example's own.
		name: "load_balancing", server: "server", client: "client",
		servers:    [][]string{nil},
		ready:      []string{"tcp:127.0.0.1:50051", "tcp:127.0.0.1:50052"},
		fixedPorts: []int{50051, 50052},
		// Which backends round_robin's ten calls reach depends on when
		// the second connection is READY, on either stack: the calls
		// count, not their spread (balancer_test.go in the root package
		// checks the spread, waiting for both backends).
		normalise: backendsAfter("with round_robin"),
	},
	{
		// A balancer of the example's own (custom_round_robin, built on
		// endpointsharding and pick_first) picks the second of two servers
		// every third call; the client loops until it sees 1:2.
		name: "customloadbalancer", server: "server", client: "client",
		servers:    [][]string{nil},
		ready:      []string{"tcp:127.0.0.1:50050", "tcp:127.0.0.1:50051"},
		fixedPorts: []int{50050, 50051},
		normalise:  distinct,
	},
	{
		// passthrough:/// and a resolver of the example's own.
		name: "name_resolving", server: "server", client: "client",
		servers:    [][]string{nil},
		ready:      []string{"tcp:127.0.0.1:50051"},
		fixedPorts: []int{50051},
	},
	{
		// Three servers ([::]:50051, 127.0.0.1:50052, [::1]:50053); the
		// dns resolver and pick_first, then endpoints of two addresses
		// each under round_robin until it sees 1:1:1.
		name: "dualstack", server: "server", client: "client",
		ipv6:       true,
		servers:    [][]string{nil},
		ready:      []string{"tcp:[::1]:50051", "tcp:127.0.0.1:50051", "tcp:127.0.0.1:50052", "tcp:[::1]:50053"},
		fixedPorts: []int{50051, 50052, 50053},
		normalise: func(lines []string) []string {
			re := regexp.MustCompile(`request:\d+`)
			for i, l := range lines {
				lines[i] = re.ReplaceAllString(l, "request:N")
			}
			return distinctAfter("Change to use example name resolver")(lines)
		},
	},
	{
		// An abstract unix socket named by the pairing.
		name: "unix_abstract", server: "server", client: "client",
		linuxOnly:  true,
		servers:    [][]string{{"-addr={name}"}},
		ready:      []string{"unix:@{name}"},
		clientArgs: []string{"-addr={name}"},
	},
	{
		// A server that fails three calls in four with UNAVAILABLE and a
		// client whose retry policy makes four attempts.
		name: "retry", server: "server", client: "client",
		servers:    [][]string{{"-port={port}"}},
		ready:      []string{"tcp:127.0.0.1:{port}"},
		clientArgs: []string{"-addr=localhost:{port}"},
	},
	{
		// Two servers whose health flips between SERVING and NOT_SERVING
		// (every 2s here, 5s by default); the client calls every second
		// under round_robin with client-side health checking, so it sees
		// answers and, while neither server is serving, UNAVAILABLE.
		name: "health", server: "server", client: "client",
		servers:    [][]string{{"-port=50051", "-sleep=2s"}, {"-port=50052", "-sleep=2s"}},
		ready:      []string{"tcp:127.0.0.1:50051", "tcp:127.0.0.1:50052"},
		fixedPorts: []int{50051, 50052},
		done:       func(_ string, ran time.Duration) bool { return ran > 5500*time.Millisecond },
		normalise: func(lines []string) []string {
			// Each flip of health makes a new round_robin picker, which
			// starts at a random backend: which of the two answers in a
			// window of two calls is chance, in grpc-go as in leangrpc.
			for i, l := range lines {
				lines[i] = strings.NewReplacer("localhost:50051", "localhost:5005x", "localhost:50052", "localhost:5005x").Replace(l)
			}
			return distinct(lines)
		},
	},
	{
		// Three servers (:10001-:10003, the third slow) under round_robin,
		// 100 calls of 150ms deadline; channelz served by both programs.
		name: "debugging", server: "server", client: "client",
		servers:    [][]string{nil},
		ready:      []string{"tcp:127.0.0.1:10001", "tcp:127.0.0.1:10002", "tcp:127.0.0.1:10003", "tcp:127.0.0.1:50052"},
		clientArgs: []string{"-addr=localhost:{port}"},
		fixedPorts: []int{10001, 10002, 10003, 50052},
		done: func(out string, _ time.Duration) bool {
			return countLines(out, regexp.MustCompile(`(?m)(Greeting: |could not greet: ).*$`)) >= 100
		},
		whileRunning: channelzCounts,
		normalise: func(lines []string) []string {
			// A call whose deadline passes ends with the client's own
			// "context deadline exceeded" or, when the server's reset
			// arrives first, "stream terminated by RST_STREAM with error
			// code: CANCEL": both are DeadlineExceeded, and which comes
			// first is a race in grpc-go as in leangrpc.
			re := regexp.MustCompile(`code = DeadlineExceeded desc = .*`)
			for i, l := range lines {
				lines[i] = re.ReplaceAllString(l, "code = DeadlineExceeded desc = ...")
			}
			return distinct(lines)
		},
	},
	{
		// One program: calls with and without WaitForReady before its
		// server starts listening on :50053, two seconds in.
		name: "wait_for_ready", client: ".",
		fixedPorts: []int{50053},
		normalise: func(lines []string) []string {
			// Three goroutines print; they end in an order set by timers.
			sort.Strings(lines)
			return lines
		},
	},
	{
		// Client and server keepalive parameters; the client makes one call
		// and then idles. It runs past the server's first keepalive ping
		// (5s), which must pass unremarked.
		name: "keepalive", server: "server", client: "client",
		servers:    [][]string{{"-port={port}"}},
		ready:      []string{"tcp:127.0.0.1:{port}"},
		clientArgs: []string{"-addr=localhost:{port}"},
		done: func(out string, ran time.Duration) bool {
			return strings.Contains(out, "RPC response:") && ran > 6500*time.Millisecond
		},
	},
}
