package leangrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
)

// TestKeepaliveTimeRaised: a client asking for keepalive pings every
// second pings every 10 s instead, as grpc-go's does, so a server with
// grpc-go's default enforcement policy (pings at least 5 minutes apart;
// the third strike gets GOAWAY too_many_pings) keeps the connection of a
// call that stays quiet for several seconds. Both clients, in parallel
// (about 5 s), against grpc-go's server, the policy's reference (leangrpc's
// server enforces the same one).
func TestKeepaliveTimeRaised(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 4.5 s")
	}
	const quiet = 4500 * time.Millisecond // four 1 s pings: three strikes
	base, bufs := baseline()
	t.Run("group", func(t *testing.T) {
		for _, server := range stacks[1:] { // grpc-go
			for _, client := range stacks {
				t.Run(client.name+"-client_"+server.name+"-server", func(t *testing.T) {
					t.Parallel()
					srv := serveOn(t, server.lean, streamService(func(_ any, stream grpc.ServerStream) error {
						for {
							var m testpb.Empty
							if err := stream.RecvMsg(&m); err == io.EOF {
								return nil
							} else if err != nil {
								return err
							}
							if err := stream.SendMsg(&m); err != nil {
								return err
							}
						}
					}), struct{}{})
					kp := keepalive.ClientParameters{Time: time.Second, Timeout: time.Second}
					var cc grpc.ClientConnInterface
					if client.lean {
						c, err := leangrpc.NewClient(srv.addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithKeepaliveParams(kp))
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { c.Close() })
						cc = c
					} else {
						c, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithKeepaliveParams(kp))
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { c.Close() })
						cc = c
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					cs, err := cc.NewStream(ctx, bidiDesc, streamMethod)
					if err != nil {
						t.Fatal(err)
					}
					for round := range 2 {
						if round == 1 {
							time.Sleep(quiet)
						}
						if err := cs.SendMsg(&testpb.Empty{}); err != nil {
							t.Fatalf("round %d: SendMsg: %v", round, err)
						}
						if err := cs.RecvMsg(new(testpb.Empty)); err != nil {
							t.Fatalf("round %d: RecvMsg: %v", round, err)
						}
					}
					cs.CloseSend()
					if err := cs.RecvMsg(new(testpb.Empty)); err != io.EOF {
						t.Errorf("end: %v, want io.EOF", err)
					}
				})
			}
		}
	})
	checkGoroutines(t, base)
	checkBuffers(t, bufs)
}

// TestServerKeepaliveSharedTimers: the server's keepalive timers live
// in the process-wide sharedTimer heap. With many connections at once,
// each silent client must get its PING after Time and lose its connection
// after Timeout (not later, not never), while the clients that answer keep
// theirs over several rounds (their timers re-armed among the others being
// removed).
func TestServerKeepaliveSharedTimers(t *testing.T) {
	sockio.StartIdlePoller()
	const every, timeout = 100 * time.Millisecond, 100 * time.Millisecond
	_, addr := serve(t, leangrpc.KeepaliveParamsUnfloored(keepalive.ServerParameters{Time: every, Timeout: timeout}))
	const conns = 16
	type result struct {
		answering bool
		firstPing time.Duration
		pings     int
		closedAt  time.Duration // 0: still open at the end
		err       error
	}
	results := make([]result, conns)
	var wg sync.WaitGroup
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p := h2test.NewPeer(t, c, h2test.ClientRole)
		p.Greet()
		start := time.Now()
		answering := i%2 == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.answering = answering
			end := start.Add(900 * time.Millisecond)
			for time.Now().Before(end) {
				f, err := p.ReadFrame(time.Until(end))
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						r.closedAt = time.Since(start)
					}
					return
				}
				if f.Type == h2frame.TypePing && !f.IsAck() {
					if r.pings == 0 {
						r.firstPing = time.Since(start)
					}
					r.pings++
					if answering {
						p.WritePingAck(f.PingData())
					}
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range results {
		switch {
		case r.answering:
			if r.closedAt != 0 || r.pings < 3 {
				t.Errorf("conn %d (answers pings): closed at %v after %d pings; want open with a ping every %v", i, r.closedAt, r.pings, every)
			}
		default:
			if r.pings == 0 || r.firstPing < every-20*time.Millisecond {
				t.Errorf("conn %d (silent): first ping at %v (%d pings), want one after %v", i, r.firstPing, r.pings, every)
			}
			if r.closedAt == 0 || r.closedAt < every+timeout-20*time.Millisecond {
				t.Errorf("conn %d (silent): closed at %v, want about %v", i, r.closedAt, every+timeout)
			}
		}
	}
}

// TestKeepaliveTooManyPings: when a server answers a client's keepalive
// pings with GOAWAY ENHANCE_YOUR_CALM "too_many_pings", the channel's
// later connections ping at twice the configured time, as grpc-go's do;
// calls keep working over a new connection.
func TestKeepaliveTooManyPings(t *testing.T) {
	base, bufs := baseline()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// grpc-go's default policy (pings at least 5 minutes apart, not
	// without streams): the client's pings every 20 ms are strikes.
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	const every = 20 * time.Millisecond
	cc, err := leangrpc.NewClient(lis.Addr().String(),
		leangrpc.WithKeepaliveParamsUnfloored(keepalive.ClientParameters{Time: every, Timeout: time.Second, PermitWithoutStream: true}))
	if err != nil {
		t.Fatal(err)
	}
	client := testgrpc.NewTestServiceClient(cc)
	if _, err := client.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for leangrpc.KeepaliveTimeOf(cc) != 2*every {
		if time.Now().After(deadline) {
			t.Fatalf("keepalive time %v 10 s after the first ping, want %v after GOAWAY too_many_pings", leangrpc.KeepaliveTimeOf(cc), 2*every)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := client.EmptyCall(ctxT(t), &testpb.Empty{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("call after the GOAWAY: %v", err)
	}
	cc.Close()
	s.Stop()
	<-done
	checkGoroutines(t, base)
	checkBuffers(t, bufs)
}
