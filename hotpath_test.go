package leangrpc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// A unary call between a leangrpc client and server allocates little, both
// sides and the codec counted: the client's stream object goes back to the
// connection after Invoke (grpcwire.ClientStream.Release) and both ends
// reuse released streams.
func TestUnaryCallAllocations(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	e := setup(t, pairs[0], serverSettings{}, clientSettings{})
	defer e.stop()
	req := &testpb.SimpleRequest{}
	// A context that can end costs nothing more: Invoke's waits watch it
	// (h2conn.StreamOptions.WatchCanceled), no context.AfterFunc.
	cancelable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ctx := range []context.Context{context.Background(), cancelable} {
		for range 50 { // warm up pools and free lists
			if _, err := e.tc.UnaryCall(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		allocs := testing.AllocsPerRun(300, func() {
			if _, err := e.tc.UnaryCall(ctx, req); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%.1f allocations per unary call (%v)", allocs, ctx)
		if allocs > maxUnaryAllocs {
			t.Errorf("%.1f allocations per unary call (%v), want at most %d", allocs, ctx, maxUnaryAllocs)
		}
	}
}

const maxUnaryAllocs = 18

// The handler's context is the call's own object (no context allocations):
// it still answers the metadata, peer and method, lends contexts derived
// from it its cancellation (client cancel, deadline), and ends once the
// handler returned.
func TestHandlerContextIsTheCall(t *testing.T) {
	type seen struct {
		md        metadata.MD
		mdOK      bool
		method    string
		peerOK    bool
		derived   error // a WithCancel child's error once the call ended
		after     bool  // context.AfterFunc ran
		kept      context.Context
		deadline  bool
		endReason error
	}
	got := make(chan *seen, 4)
	wait := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s := &seen{kept: ctx}
		s.md, s.mdOK = metadata.FromIncomingContext(ctx)
		s.method, _ = grpc.Method(ctx)
		_, s.peerOK = peer.FromContext(ctx)
		_, s.deadline = ctx.Deadline()
		if len(s.md.Get("wait")) > 0 {
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			ran := make(chan struct{})
			context.AfterFunc(ctx, func() { close(ran) })
			<-child.Done()
			s.derived = child.Err()
			select {
			case <-ran:
				s.after = true
			case <-time.After(5 * time.Second):
			}
			s.endReason = ctx.Err()
		}
		got <- s
		return h(ctx, req)
	}
	e := setup(t, pairs[1], serverSettings{unary: []grpc.UnaryServerInterceptor{wait}}, clientSettings{})

	// No custom metadata: FromIncomingContext still returns an MD.
	if _, err := e.tc.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if !s.mdOK || len(s.md.Get(":authority")) != 1 || s.method != "/grpc.testing.TestService/EmptyCall" || !s.peerOK || s.deadline {
		t.Errorf("plain call: %+v", s)
	}
	select {
	case <-s.kept.Done():
	case <-time.After(5 * time.Second):
		t.Error("the handler's context did not end after the call")
	}
	if s.kept.Err() != context.Canceled {
		t.Errorf("after the call: %v", s.kept.Err())
	}

	// Client cancel reaches contexts derived from the handler's.
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "wait", "1"))
	go func() { time.Sleep(30 * time.Millisecond); cancel() }()
	if _, err := e.tc.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.Canceled {
		t.Errorf("cancel: %v", err)
	}
	s = <-got
	if s.derived != context.Canceled || !s.after || s.endReason != context.Canceled {
		t.Errorf("cancel seen by the handler: %+v", s)
	}

	// A deadline ends it (with DeadlineExceeded, or Canceled when the
	// client's reset arrives before the server's timer fires).
	ctx, cancel = context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "wait", "1"), 30*time.Millisecond)
	defer cancel()
	if _, err := e.tc.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("deadline: %v", err)
	}
	s = <-got
	if !s.deadline || s.derived == nil || s.derived != s.endReason || !s.after {
		t.Errorf("deadline seen by the handler: %+v", s)
	}
}
