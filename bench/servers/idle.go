package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leangrpc/leangrpc"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// idleResult is one server's resident memory with many idle connections.
type idleResult struct {
	server string
	round  int
	conns  int
	base   int64 // RSS with one connection that has made a call
	loaded int64 // RSS with conns more, each after one call
	err    error
}

// perConn is the RSS growth per idle connection, in bytes.
func (r idleResult) perConn() float64 {
	if r.conns == 0 {
		return 0
	}
	return float64(r.loaded-r.base) / float64(r.conns)
}

func (r idleResult) line() string {
	if r.err != nil {
		return fmt.Sprintf("round %d %-8s idle FAILED: %v", r.round, r.server, r.err)
	}
	return fmt.Sprintf("round %d %-8s idle: RSS %.1f MiB -> %.1f MiB with %d connections: %.1f KB per connection",
		r.round, r.server, float64(r.base)/(1<<20), float64(r.loaded)/(1<<20), r.conns, r.perConn()/1000)
}

// settle is how long the server gets to finish its work on new
// connections before its RSS is read.
const settle = time.Second

// measureIdle starts a fresh server, opens o.idleConns client connections
// that each make one EmptyCall and then stay open, and reads the server's
// RSS growth.
func measureIdle(ctx context.Context, o options, name, bin string, round int) idleResult {
	r := idleResult{server: name, round: round, conns: o.idleConns}
	srv, err := startServer(ctx, name, bin)
	if err != nil {
		r.err = err
		return r
	}
	r.err = measureIdleStarted(ctx, srv, &r)
	if err := srv.stop(); r.err == nil {
		r.err = err
	}
	return r
}

func measureIdleStarted(ctx context.Context, srv *serverProc, r *idleResult) error {
	first, err := idleConn(ctx, srv.addr)
	if err != nil {
		return err
	}
	conns := []*leangrpc.ClientConn{first}
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	time.Sleep(settle)
	if r.base, err = residentBytes(srv.pid()); err != nil {
		return err
	}

	// Open the connections a few dozen at a time: fast, without a burst
	// that overflows the listener's backlog.
	const parallel = 32
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, parallel)
	)
	for i := 0; i < r.conns; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			cc, err := idleConn(ctx, srv.addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			conns = append(conns, cc)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("opening idle connections: %v", firstErr)
	}
	time.Sleep(settle)
	r.loaded, err = residentBytes(srv.pid())
	return err
}

// idleConn opens a client connection and makes one call on it, so the
// server has accepted it, read the preface and served a stream.
func idleConn(ctx context.Context, addr string) (*leangrpc.ClientConn, error) {
	cc, err := leangrpc.NewClient(addr, leangrpc.WithInsecure())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := testpb.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{}); err != nil {
		cc.Close()
		return nil, err
	}
	return cc, nil
}
