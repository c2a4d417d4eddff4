package leangrpc_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
