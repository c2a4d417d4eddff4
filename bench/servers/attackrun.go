package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/leangrpc/leangrpc"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// attackQuiet is the legitimate client's time alone with the server before
// an attack, the baseline of its latency.
const attackQuiet = 2 * time.Second

// attackResult is one server under one attack.
type attackResult struct {
	attack, server string
	rssBefore      int64         // before the attack
	rssGrowth      int64         // the most the RSS rose over rssBefore during the attack
	cores          float64       // the server's CPU over the attack, in cores
	p50Quiet       time.Duration // the legitimate client's median call before the attack
	p50Attack      time.Duration // ... and during it
	legitOK        int           // legitimate calls that succeeded during the attack
	legitFailed    int
	firstFailure   string
	perStalled     float64 // slowloris: RSS per stalled connection, bytes
	stats          *attackStats
	err            error
}

func (r attackResult) line() string {
	if r.err != nil {
		return fmt.Sprintf("%-14s %-8s FAILED: %v", r.attack, r.server, r.err)
	}
	s := fmt.Sprintf("%-14s %-8s RSS +%5.1f MiB, %4.2f cores, legit p50 %v → %v (%d ok, %d failed), %s",
		r.attack, r.server, float64(r.rssGrowth)/(1<<20), r.cores, r.p50Quiet.Round(time.Microsecond),
		r.p50Attack.Round(time.Microsecond), r.legitOK, r.legitFailed, r.stats.reaction())
	if r.attack == "slowloris" {
		s += fmt.Sprintf("; %.0f B per stalled conn, %d still open at the end, last closed at %v",
			r.perStalled, r.stats.Held, r.stats.LastClose.Round(100*time.Millisecond))
	}
	if r.firstFailure != "" {
		s += "; first failure: " + r.firstFailure
	}
	return s
}

// legitClient calls UnaryCall one call at a time until stopped, keeping
// each call's start and latency or error.
type legitClient struct {
	mu    sync.Mutex
	calls []legitCall
}

type legitCall struct {
	start time.Time
	took  time.Duration
	err   error
}

func (l *legitClient) run(ctx context.Context, addr string) {
	cc, err := leangrpc.NewClient(addr, leangrpc.WithInsecure())
	if err != nil {
		l.add(legitCall{start: time.Now(), err: err})
		return
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	req := unaryRequest(16)
	for ctx.Err() == nil {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := client.UnaryCall(cctx, req)
		cancel()
		if ctx.Err() != nil {
			return
		}
		l.add(legitCall{start: start, took: time.Since(start), err: err})
		time.Sleep(time.Millisecond)
	}
}

func (l *legitClient) add(c legitCall) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

// window returns the median latency of the successful calls started in
// [from, to), their count, the failures and the first failure's error.
func (l *legitClient) window(from, to time.Time) (p50 time.Duration, ok, failed int, first string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lat []time.Duration
	for _, c := range l.calls {
		if c.start.Before(from) || !c.start.Before(to) {
			continue
		}
		if c.err != nil {
			if failed == 0 {
				first = c.err.Error()
			}
			failed++
			continue
		}
		lat = append(lat, c.took)
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		p50 = lat[len(lat)/2]
	}
	return p50, len(lat), failed, first
}

// runAttacks runs every attack of o against every server, each on a fresh
// server process, and prints a line per run and a table.
func runAttacks(ctx context.Context, o options, bins map[string]string, out io.Writer) error {
	fmt.Fprintf(out, "# %s; each attack %v on a fresh server with default options, a legitimate client calling UnaryCall one at a time throughout\n",
		machine(), o.attackDuration)
	if contains(o.servers, serverNghttpd) {
		fmt.Fprintln(out, "# nghttpd left out: the attacks and the legitimate client's calls are gRPC")
	}
	var results []attackResult
	for _, a := range o.attacks {
		for _, name := range grpcServers(o.servers) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r := measureAttack(ctx, o, a, name, bins[name])
			fmt.Fprintln(out, r.line())
			results = append(results, r)
		}
	}
	fmt.Fprintln(out)
	writeAttackReport(out, results)
	for _, r := range results {
		if r.err != nil {
			return fmt.Errorf("some attack runs failed; see above")
		}
	}
	return nil
}

func measureAttack(ctx context.Context, o options, a attack, name, bin string) attackResult {
	r := attackResult{attack: a.name, server: name, stats: &attackStats{}}
	srv, err := startServer(ctx, name, bin)
	if err != nil {
		r.err = err
		return r
	}
	defer func() {
		if err := srv.stop(); r.err == nil && err != nil {
			r.err = err
		}
	}()
	if r.err = verifyUnary(ctx, srv.addr, 16); r.err != nil {
		return r
	}
	lctx, stopLegit := context.WithCancel(ctx)
	defer stopLegit()
	legit := &legitClient{}
	legitDone := make(chan struct{})
	go func() { defer close(legitDone); legit.run(lctx, srv.addr) }()
	defer func() { stopLegit(); <-legitDone }()

	quietStart := time.Now()
	sleepCtx(ctx, attackQuiet)
	if r.rssBefore, r.err = residentBytes(srv.pid()); r.err != nil {
		return r
	}
	before, err := sampleProc(srv.pid())
	if err != nil {
		r.err = err
		return r
	}
	attackStart := time.Now()
	actx, cancel := context.WithTimeout(ctx, o.attackDuration)
	defer cancel()
	cmd, aout, err := startAttacker(ctx, a, srv.addr, o.attackDuration)
	if err != nil {
		r.err = err
		return r
	}

	// Sample the RSS until the attack's time is up.
	var stalledRSS int64
	tick := time.NewTicker(100 * time.Millisecond)
	for actx.Err() == nil {
		select {
		case <-tick.C:
		case <-actx.Done():
		}
		rss, err := residentBytes(srv.pid())
		if err != nil {
			break
		}
		r.rssGrowth = max(r.rssGrowth, rss-r.rssBefore)
		// Slowloris's connections are counted once the burst that opened
		// them has settled (its garbage collected, the heap at its goal)
		// and before ConnectionTimeout closes them.
		if time.Since(attackStart) <= stalledSample {
			stalledRSS = rss
		}
	}
	tick.Stop()
	after, err := sampleProc(srv.pid())
	attackEnd := time.Now()
	st, werr := waitAttacker(cmd, aout)
	if err == nil {
		err = werr
	}
	if err != nil {
		r.err = err
		return r
	}
	r.stats = st
	r.cores = (after.cpu - before.cpu).Seconds() / attackEnd.Sub(attackStart).Seconds()
	r.p50Quiet, _, _, _ = legit.window(quietStart, attackStart)
	r.p50Attack, r.legitOK, r.legitFailed, r.firstFailure = legit.window(attackStart, attackEnd)
	if a.name == "slowloris" {
		r.perStalled = float64(stalledRSS-r.rssBefore) / slowlorisConns
	}
	return r
}

// writeAttackReport prints the runs as a Markdown table.
func writeAttackReport(w io.Writer, results []attackResult) {
	fmt.Fprintln(w, "| attack | server | RSS growth | server CPU (cores) | legitimate p50 quiet → attacked | legitimate calls ok / failed | the server's reaction |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|---|---|")
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(w, "| %s | %s | failed: %v | | | | |\n", r.attack, r.server, r.err)
			continue
		}
		reaction := r.stats.reaction()
		if r.attack == "slowloris" {
			reaction += fmt.Sprintf("; %.1f KB per stalled conn; %d open at the end; last closed at %v",
				r.perStalled/1000, r.stats.Held, r.stats.LastClose.Round(100*time.Millisecond))
		}
		fmt.Fprintf(w, "| %s | %s | %.1f MiB | %.2f | %v → %v | %d / %d | %s |\n",
			r.attack, r.server, float64(r.rssGrowth)/(1<<20), r.cores,
			r.p50Quiet.Round(time.Microsecond), r.p50Attack.Round(time.Microsecond), r.legitOK, r.legitFailed, reaction)
	}
}
