package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leangrpc/leangrpc"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// The streaming shape: h2load cannot stream, so a Go client (leangrpc's)
// drives FullDuplexCall ping-pong on every server alike. Its own CPU
// shares the machine with the server, the same for every server.

func streamRequest(payload int) *testpb.StreamingOutputCallRequest {
	return &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{Size: int32(payload)}},
		Payload:            &testpb.Payload{Body: make([]byte, payload)},
	}
}

// measureStream runs one server process through the streaming shape:
// o.clients connections with o.streams FullDuplexCall streams each, every
// stream sending a message and waiting for the answer in turn.
func measureStream(ctx context.Context, o options, name, bin string, round int) runResult {
	r := runResult{server: name, round: round, streaming: true}
	srv, err := startServer(ctx, name, bin)
	if err != nil {
		r.err = err
		return r
	}
	r.err = measureStreamStarted(ctx, o, srv, &r)
	if err := srv.stop(); r.err == nil {
		r.err = err
	}
	return r
}

func measureStreamStarted(ctx context.Context, o options, srv *serverProc, r *runResult) error {
	var conns []*leangrpc.ClientConn
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	for i := 0; i < o.clients; i++ {
		cc, err := leangrpc.NewClient(srv.addr, leangrpc.WithInsecure())
		if err != nil {
			return err
		}
		conns = append(conns, cc)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		msgs     atomic.Int64
		stopping atomic.Bool
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		cancel()
	}
	req := streamRequest(o.payload)
	for _, cc := range conns {
		client := testpb.NewTestServiceClient(cc)
		for i := 0; i < o.streams; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := pingPong(ctx, client, req, o.payload, &msgs, &stopping); err != nil {
					fail(err)
				}
			}()
		}
	}

	wait := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}
	var err error
	var before, after, cliBefore, cliAfter procSample
	var n0, n1 int64
	var start time.Time
	if !wait(o.warmup) {
		goto done
	}
	if before, err = sampleProc(srv.pid()); err != nil {
		fail(err)
		goto done
	}
	cliBefore, _ = sampleProc(os.Getpid())
	n0, start = msgs.Load(), time.Now()
	if !wait(o.duration) {
		goto done
	}
	n1 = msgs.Load()
	r.reqPerSec = float64(n1-n0) / time.Since(start).Seconds()
	cliAfter, _ = sampleProc(os.Getpid())
	if after, err = sampleProc(srv.pid()); err != nil {
		fail(err)
	}
done:
	stopping.Store(true)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.requests = n1 - n0
	r.cpu, r.ctxsw = after.cpu-before.cpu, after.ctxsw-before.ctxsw
	r.clientCPU = cliAfter.cpu - cliBefore.cpu
	if r.requests == 0 {
		return errors.New("no message answered in the measured window")
	}
	return nil
}

// pingPong runs one stream until stopping is set, then half-closes and
// expects the server to end the call with an OK status.
func pingPong(ctx context.Context, client testpb.TestServiceClient, req *testpb.StreamingOutputCallRequest,
	payload int, msgs *atomic.Int64, stopping *atomic.Bool) error {
	stream, err := client.FullDuplexCall(ctx)
	if err != nil {
		return err
	}
	for !stopping.Load() {
		if err := stream.Send(req); err != nil {
			return fmt.Errorf("send: %v", err)
		}
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("receive: %v", err)
		}
		if got := len(resp.GetPayload().GetBody()); got != payload {
			return fmt.Errorf("response payload of %d bytes, want %d", got, payload)
		}
		msgs.Add(1)
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != io.EOF {
		return fmt.Errorf("after half-close: %v, want the end of the call", err)
	}
	return nil
}
