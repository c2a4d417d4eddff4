package leangrpc_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// TestConcurrentSendMsg: SendMsg called from many goroutines at once on
// one server stream (misuse, which grpc-go documents as unsafe) never puts
// a malformed message on the wire: every message the client receives is
// one that a sender sent, whole. A sender may fail with Internal instead.
// grpc-go's server runs the same case (without the race detector, which
// would flag grpc-go's own fields).
func TestConcurrentSendMsg(t *testing.T) {
	const (
		senders  = 8
		messages = 40
		size     = 100 << 10 // over the client's stream window: senders park mid-message
	)
	forStacks(t, func(t *testing.T, client, server stack) {
		if raceOn && !server.lean {
			t.Skip("grpc-go's server stream is not safe for concurrent SendMsg under the race detector")
		}
		var sent, refused atomic.Int64
		var other atomic.Value
		srv := serveOn(t, server.lean, streamService(func(_ any, stream grpc.ServerStream) error {
			var wg sync.WaitGroup
			for g := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := bytes.Repeat([]byte{byte('a' + g)}, size+g)
					for range messages {
						err := stream.SendMsg(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}})
						switch {
						case err == nil:
							sent.Add(1)
						case status.Code(err) == codes.Internal:
							refused.Add(1)
						default:
							other.CompareAndSwap(nil, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			return nil
		}), struct{}{})
		cc := dialOn(t, client.lean, srv.addr)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cs, err := cc.NewStream(ctx, bidiDesc, streamMethod)
		if err != nil {
			t.Fatal(err)
		}
		cs.CloseSend()
		received := 0
		for {
			var m testpb.StreamingOutputCallResponse
			err := cs.RecvMsg(&m)
			if err == io.EOF {
				break
			}
			if err != nil && !server.lean && status.Code(err) == codes.Internal {
				// grpc-go's server stream can fail the whole call under
				// this misuse ("SendHeader called multiple times" when
				// two senders race for its headers): its behaviour, not
				// the client's.
				t.Logf("grpc-go's server ended the call after %d messages: %v", received, err)
				return
			}
			if err != nil {
				t.Fatalf("RecvMsg after %d messages: %v", received, err)
			}
			if !sentWhole(m.GetPayload().GetBody(), size, senders) {
				t.Fatalf("message %d is not one a sender sent (%d bytes)", received, len(m.GetPayload().GetBody()))
			}
			received++
		}
		if err, _ := other.Load().(error); err != nil {
			t.Errorf("a SendMsg failed with %v, want nil or Internal", err)
		}
		if int64(received) != sent.Load() {
			t.Errorf("received %d messages, the senders sent %d (%d refused)", received, sent.Load(), refused.Load())
		}
		t.Logf("sent %d, refused %d", sent.Load(), refused.Load())
	})
}

// sentWhole reports whether body is a message one of the senders of
// TestConcurrentSendMsg sent: sender g sends size+g bytes of 'a'+g.
func sentWhole(body []byte, size, senders int) bool {
	g := len(body) - size
	return g >= 0 && g < senders && bytes.Equal(body, bytes.Repeat([]byte{byte('a' + g)}, size+g))
}

// TestConcurrentClientSendMsg is TestConcurrentSendMsg from the client:
// many goroutines call SendMsg at once on one client stream, and the
// server checks that every message it receives is whole.
func TestConcurrentClientSendMsg(t *testing.T) {
	const (
		senders  = 8
		messages = 40
		size     = 100 << 10
	)
	forStacks(t, func(t *testing.T, client, server stack) {
		if raceOn && !client.lean {
			t.Skip("grpc-go's client stream is not safe for concurrent SendMsg under the race detector")
		}
		srv := serveOn(t, server.lean, streamService(func(_ any, stream grpc.ServerStream) error {
			received := 0
			for {
				var m testpb.StreamingOutputCallResponse
				err := stream.RecvMsg(&m)
				if err == io.EOF {
					return stream.SendMsg(&testpb.SimpleResponse{Username: fmt.Sprint(received)})
				}
				if err != nil {
					return err
				}
				if !sentWhole(m.GetPayload().GetBody(), size, senders) {
					return status.Errorf(codes.DataLoss, "message %d is not one a sender sent (%d bytes)", received, len(m.GetPayload().GetBody()))
				}
				received++
			}
		}), struct{}{})
		cc := dialOn(t, client.lean, srv.addr)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cs, err := cc.NewStream(ctx, bidiDesc, streamMethod)
		if err != nil {
			t.Fatal(err)
		}
		var sent, refused atomic.Int64
		var wg sync.WaitGroup
		for g := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := bytes.Repeat([]byte{byte('a' + g)}, size+g)
				for range messages {
					err := cs.SendMsg(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}})
					switch {
					case err == nil:
						sent.Add(1)
					case status.Code(err) == codes.Internal:
						refused.Add(1)
					default:
						t.Errorf("SendMsg: %v, want nil or Internal", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		cs.CloseSend()
		var reply testpb.SimpleResponse
		if err := cs.RecvMsg(&reply); err != nil {
			t.Fatalf("RecvMsg: %v", err)
		}
		if reply.GetUsername() != fmt.Sprint(sent.Load()) {
			t.Errorf("the server received %s messages, the senders sent %d (%d refused)", reply.GetUsername(), sent.Load(), refused.Load())
		}
		t.Logf("sent %d, refused %d", sent.Load(), refused.Load())
	})
}
