// Command servers benchmarks three gRPC servers of
// grpc.testing.TestService under one load generator: leangrpc's and
// grpc-go's (the interop server program in interop/server, built for each
// transport) and a minimal Rust tonic server (tonic/ beside this file).
// nghttpd, nghttp2's C HTTP/2 server, serving the gRPC answer's bytes as a
// static file, is the floor beside them: HTTP/2 alone, with no gRPC work.
//
// h2load, nghttp2's C load generator, drives every server the same way
// (unary calls over a few connections with many concurrent streams), so
// the client's cost is the same for all three and the figures compare the
// servers alone. Each run starts a fresh server process; rounds interleave
// the servers so that drift in the machine's load spreads over all of them.
// Server CPU time comes from /proc/PID/stat over the measured window, after
// a warm-up. Each round also measures each server's resident memory per
// idle connection and, since h2load cannot stream, a FullDuplexCall
// ping-pong shape driven by leangrpc's client. -strace, -allocs and
// -cpuprofile add diagnostic runs after the rounds.
//
//	go run ./bench/servers                 # 3 rounds, all three servers
//	go run ./bench/servers -rounds 1 -servers leangrpc,grpc-go
//	go run ./bench/servers -attacks all -servers leangrpc,grpc-go
//
// It needs Linux (/proc), h2load (Debian: nghttp2-client), nghttpd
// (Debian: nghttp2-server) and, for tonic, cargo and protoc (Debian:
// protobuf-compiler). See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Server names, in the order of each round.
const (
	serverTonic    = "tonic"
	serverLeangrpc = "leangrpc"
	serverGrpcGo   = "grpc-go"
	serverNghttpd  = "nghttpd"
)

var allServers = []string{serverTonic, serverLeangrpc, serverGrpcGo, serverNghttpd}

// isGRPCServer tells whether a server serves gRPC: nghttpd serves a static
// answer to one URL, so only the h2load runs apply to it.
func isGRPCServer(name string) bool { return name != serverNghttpd }

// grpcServers are the gRPC servers of list, in its order.
func grpcServers(list []string) []string {
	var out []string
	for _, s := range list {
		if isGRPCServer(s) {
			out = append(out, s)
		}
	}
	return out
}

// options are the command's flags.
type options struct {
	rounds     int
	duration   time.Duration
	warmup     time.Duration
	clients    int // h2load -c: connections
	streams    int // h2load -m: concurrent streams per connection
	payload    int // request and response payload bytes
	idleConns  int // connections of the idle-RSS measurement; 0 skips it
	streaming  bool
	servers    []string
	h2load     string
	nghttpd    string
	binDir     string
	skipBuild  bool
	cargoJobs  int
	cpuProfile string // a file for an extra leangrpc run with a CPU profile
	strace     bool   // an extra run per server under strace -c
	allocs     bool   // an extra run per server counting allocations
	// attacks, when not empty, replaces the load runs: each server under
	// each attack for attackDuration.
	attacks        []attack
	attackDuration time.Duration
	// attacker, when set, makes this process the attacking one (attacker.go).
	attacker, attackAddr string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("servers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.rounds, "rounds", 3, "Interleaved rounds; the table shows medians over them")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "Measured time of each run (h2load -D)")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "Load before the measured window, not counted")
	fs.IntVar(&o.clients, "c", 2, "h2load connections (-c)")
	fs.IntVar(&o.streams, "m", 50, "h2load concurrent streams per connection (-m)")
	fs.IntVar(&o.payload, "payload", 16, "Payload bytes of each request and of each response")
	fs.BoolVar(&o.streaming, "streaming", true, "Also run the streaming shape: FullDuplexCall ping-pong on -c connections x -m streams, driven by leangrpc's client")
	fs.IntVar(&o.idleConns, "idle_conns", 2000, "Idle connections for the RSS-per-connection row; 0 skips it")
	list := fs.String("servers", strings.Join(allServers, ","), "Comma-separated servers to run: "+strings.Join(allServers, ", "))
	fs.StringVar(&o.h2load, "h2load", "h2load", "The h2load program")
	fs.StringVar(&o.nghttpd, "nghttpd", "nghttpd", "The nghttpd program")
	fs.StringVar(&o.binDir, "bindir", "", "Where to put the Go servers' binaries; empty means a temporary directory")
	fs.BoolVar(&o.skipBuild, "skip_build", false, "Use the binaries already in -bindir and tonic's target/release")
	fs.IntVar(&o.cargoJobs, "cargo_jobs", 1, "cargo build -j: jobs for building tonic (run at nice 10)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "After the rounds, profile one more leangrpc run into this file")
	fs.BoolVar(&o.strace, "strace", false, "After the rounds, count syscalls per request of each server with strace -c -f")
	fs.BoolVar(&o.allocs, "allocs", false, "After the rounds, count allocations per request of each server (tonic and nghttpd: need perf and libc uprobes, see README)")
	attacker := fs.String(attackerFlag, "", "Internal: be the attacking process of -attacks for this attack")
	attackAddr := fs.String("attack_addr", "", "Internal: the attacking process's target")
	attackList := fs.String("attacks", "", "Instead of the load runs, attack each server: a comma-separated list of "+strings.Join(attackNames(), ", ")+", or all")
	fs.DurationVar(&o.attackDuration, "attack_duration", 10*time.Second, "How long each attack lasts")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *attacker != "" {
		o.attacker, o.attackAddr = *attacker, *attackAddr
		return o, nil
	}
	if err := parseAttacks(&o, *attackList); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case o.rounds < 1:
		return o, errors.New("-rounds must be at least 1")
	case o.duration < time.Second:
		return o, errors.New("-duration must be at least 1s")
	case o.warmup < 0:
		return o, errors.New("-warmup must not be negative")
	case o.clients < 1 || o.streams < 1:
		return o, errors.New("-c and -m must be at least 1")
	case o.payload < 0 || o.payload > 1<<20:
		return o, errors.New("-payload must be within 0 and 1 MiB")
	case o.idleConns < 0:
		return o, errors.New("-idle_conns must not be negative")
	case o.skipBuild && o.binDir == "":
		return o, errors.New("-skip_build needs -bindir")
	}
	seen := map[string]bool{}
	for _, s := range strings.Split(*list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !isServer(s) {
			return o, fmt.Errorf("unknown server %q; servers: %s", s, strings.Join(allServers, ", "))
		}
		if !seen[s] {
			seen[s] = true
			o.servers = append(o.servers, s)
		}
	}
	if len(o.servers) == 0 {
		return o, errors.New("-servers names no server")
	}
	return o, nil
}

// parseAttacks fills o.attacks from -attacks.
func parseAttacks(o *options, list string) error {
	if list == "" {
		return nil
	}
	if o.attackDuration < time.Second {
		return errors.New("-attack_duration must be at least 1s")
	}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, a := range allAttacks {
			if n == a.name || n == "all" {
				o.attacks = append(o.attacks, a)
				found = true
			}
		}
		if !found {
			return fmt.Errorf("unknown attack %q; attacks: %s, all", n, strings.Join(attackNames(), ", "))
		}
	}
	return nil
}

func isServer(s string) bool {
	for _, a := range allServers {
		if s == a {
			return true
		}
	}
	return false
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "servers:", err)
		os.Exit(2)
	}
	if o.attacker != "" {
		if err := runAttacker(o.attacker, o.attackAddr, o.attackDuration, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "servers:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "servers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	raiseFileLimit()
	root, err := repoRoot(ctx)
	if err != nil {
		return err
	}
	if o.binDir == "" {
		if o.binDir, err = os.MkdirTemp("", "leangrpc-bench-servers-"); err != nil {
			return err
		}
		defer os.RemoveAll(o.binDir)
	}
	bins, err := buildServers(ctx, o, root, out)
	if err != nil {
		return err
	}
	if len(o.attacks) > 0 {
		return runAttacks(ctx, o, bins, out)
	}
	body := filepath.Join(o.binDir, "unary-request.bin")
	if err := os.WriteFile(body, unaryRequestFrame(o.payload), 0o644); err != nil {
		return err
	}
	if contains(o.servers, serverNghttpd) {
		if err := writeNghttpdDocRoot(nghttpdDocRoot(o.binDir), o.payload); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "# %s; h2load -c %d -m %d, %v after %v warm-up, UnaryCall with %d-byte payloads, %d round(s)\n",
		machine(), o.clients, o.streams, o.duration, o.warmup, o.payload, o.rounds)

	var runs, streams []runResult
	var idle []idleResult
	for round := 1; round <= o.rounds; round++ {
		for _, name := range o.servers {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r := measureLoad(ctx, o, name, bins[name], body, round, loadExtras{})
			fmt.Fprintln(out, r.line())
			runs = append(runs, r)
		}
		if o.streaming {
			for _, name := range grpcServers(o.servers) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r := measureStream(ctx, o, name, bins[name], round)
				fmt.Fprintln(out, r.line())
				streams = append(streams, r)
			}
		}
		if o.idleConns > 0 {
			for _, name := range grpcServers(o.servers) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r := measureIdle(ctx, o, name, bins[name], round)
				fmt.Fprintln(out, r.line())
				idle = append(idle, r)
			}
		}
	}
	fmt.Fprintln(out)
	writeReport(out, o.servers, runs, idle)
	if o.streaming {
		fmt.Fprintln(out)
		writeStreamReport(out, grpcServers(o.servers), streams)
	}

	if o.strace {
		fmt.Fprintln(out, "\n# syscalls per request under strace -c -f (strace slows every server; compare counts, not speed)")
		for _, name := range o.servers {
			r := measureLoad(ctx, o, name, bins[name], body, 0, loadExtras{strace: true})
			writeStrace(out, r)
		}
	}
	if o.allocs {
		fmt.Fprintln(out, "\n# allocations per request (tonic and nghttpd under uprobes: compare counts, not speed)")
		for _, name := range o.servers {
			c, err := measureAllocs(ctx, o, name, bins[name], body)
			writeAllocs(out, name, c, err)
		}
	}
	if o.cpuProfile != "" && contains(o.servers, serverLeangrpc) {
		prof, err := filepath.Abs(o.cpuProfile)
		if err != nil {
			return err
		}
		r := measureLoad(ctx, o, serverLeangrpc, bins[serverLeangrpc], body, 0, loadExtras{cpuProfile: prof})
		fmt.Fprintf(out, "\n# profiled run (not in the table): %s\n# CPU profile in %s: go tool pprof -top %[2]s\n",
			r.line(), prof)
	}
	for _, r := range append(runs, streams...) {
		if r.err != nil {
			return errors.New("some runs failed; see above")
		}
	}
	for _, r := range idle {
		if r.err != nil {
			return errors.New("some idle measurements failed; see above")
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
