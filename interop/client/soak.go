package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/interop"
	"google.golang.org/grpc/peer"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// newChannel returns the connection one soak iteration runs on, and the
// function that releases it. rpc_soak returns the shared connection each
// time; channel_soak creates a fresh one per iteration.
type newChannel func() (cc grpc.ClientConnInterface, release func(), err error)

// soakResult is what one worker counted.
type soakResult struct {
	succeeded, failed int
	latencies         []time.Duration // of the successful iterations
}

// doSoak runs the rpc_soak / channel_soak test: cfg.iterations large unary
// RPCs split among cfg.workers workers, each RPC on the connection newChan
// returns. An iteration fails on a non-OK status, a wrong response, or a
// latency above cfg.maxLatency. The test fails when more than
// cfg.maxFailures iterations failed, or when cfg.overallTimeout ran out
// before every iteration ran.
//
// grpc-go's interop.DoSoakTest implements the same test, but its config
// builds channels of type *grpc.ClientConn, hence this version.
func doSoak(ctx context.Context, cfg soakConfig, newChan newChannel) error {
	if cfg.workers <= 0 {
		return fmt.Errorf("soak: %d workers, want at least 1", cfg.workers)
	}
	if cfg.iterations%cfg.workers != 0 {
		return fmt.Errorf("soak: %d iterations is not a multiple of %d workers", cfg.iterations, cfg.workers)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.overallTimeout)
	defer cancel()
	results := make([]soakResult, cfg.workers)
	var wg sync.WaitGroup
	for w := range cfg.workers {
		wg.Go(func() {
			results[w] = soakWorker(ctx, cfg, w, cfg.iterations/cfg.workers, newChan)
		})
	}
	wg.Wait()

	var total soakResult
	for _, r := range results {
		total.succeeded += r.succeeded
		total.failed += r.failed
		total.latencies = append(total.latencies, r.latencies...)
	}
	slices.Sort(total.latencies)
	log.Printf("soak (server %s): %d of %d iterations succeeded, %d failed; latency %s",
		cfg.target, total.succeeded, cfg.iterations, total.failed, latencySummary(total.latencies))
	if ran := total.succeeded + total.failed; ran != cfg.iterations {
		return fmt.Errorf("soak: overall timeout %v ran out after %d of %d iterations", cfg.overallTimeout, ran, cfg.iterations)
	}
	if total.failed > cfg.maxFailures {
		return fmt.Errorf("soak: %d iterations failed, more than the %d allowed", total.failed, cfg.maxFailures)
	}
	return nil
}

// soakWorker runs n iterations, or fewer if ctx ends first.
func soakWorker(ctx context.Context, cfg soakConfig, worker, n int, newChan newChannel) soakResult {
	var res soakResult
	for i := range n {
		if ctx.Err() != nil {
			log.Printf("soak worker %d: overall timeout reached before iteration %d", worker, i)
			return res
		}
		earliestNext := time.Now().Add(cfg.minTimeBetweenRPCs)
		var p peer.Peer
		latency, err := soakIteration(ctx, cfg, newChan, &p)
		switch {
		case err != nil:
			res.failed++
			log.Printf("soak worker %d: iteration %d peer %v server %s failed: %v", worker, i, p.Addr, cfg.target, err)
		case latency > cfg.maxLatency:
			res.failed++
			log.Printf("soak worker %d: iteration %d peer %v server %s took %v, above the %v limit", worker, i, p.Addr, cfg.target, latency, cfg.maxLatency)
		default:
			res.succeeded++
			res.latencies = append(res.latencies, latency)
			log.Printf("soak worker %d: iteration %d peer %v server %s succeeded in %v", worker, i, p.Addr, cfg.target, latency)
		}
		if d := time.Until(earliestNext); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
	}
	return res
}

// soakIteration makes one large unary call on a connection from newChan and
// checks the response. The latency includes creating the connection, as it
// does in grpc-go's channel_soak.
func soakIteration(ctx context.Context, cfg soakConfig, newChan newChannel, p *peer.Peer) (time.Duration, error) {
	start := time.Now()
	cc, release, err := newChan()
	if err != nil {
		return 0, fmt.Errorf("creating the connection: %w", err)
	}
	defer release()
	req := &testpb.SimpleRequest{
		ResponseType: testpb.PayloadType_COMPRESSABLE,
		ResponseSize: int32(cfg.responseSize),
		Payload:      interop.ClientNewPayload(testpb.PayloadType_COMPRESSABLE, cfg.requestSize),
	}
	reply, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, req, grpc.Peer(p))
	if err != nil {
		return 0, fmt.Errorf("UnaryCall: %w", err)
	}
	if t, n := reply.GetPayload().GetType(), len(reply.GetPayload().GetBody()); t != testpb.PayloadType_COMPRESSABLE || n != cfg.responseSize {
		return 0, fmt.Errorf("UnaryCall replied type %v with %d bytes, want %v with %d", t, n, testpb.PayloadType_COMPRESSABLE, cfg.responseSize)
	}
	return time.Since(start), nil
}

// latencySummary formats min, median, p90 and max of sorted latencies.
func latencySummary(sorted []time.Duration) string {
	if len(sorted) == 0 {
		return "n/a"
	}
	at := func(q float64) time.Duration { return sorted[int(q*float64(len(sorted)-1))] }
	return fmt.Sprintf("min %v p50 %v p90 %v max %v", sorted[0], at(0.5), at(0.9), sorted[len(sorted)-1])
}
