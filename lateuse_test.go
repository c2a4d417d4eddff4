package leangrpc_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// lateBidiClient serves late.S/Bidi with h and returns a client of it.
func lateBidiClient(t *testing.T, h grpc.StreamHandler) *leangrpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer()
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "late.S",
		HandlerType: (*any)(nil),
		Streams:     []grpc.StreamDesc{{StreamName: "Bidi", Handler: h, ServerStreams: true, ClientStreams: true}},
	}, struct{}{})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	cc, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

var lateBidiDesc = &grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}

type recvResult struct {
	err  error
	body string
}

// lateRecvServer serves late.S/Bidi: the first call's handler receives
// one message and returns, leaving a goroutine that calls RecvMsg on its
// stream once lateGo is closed (a receive loop outliving its handler, as
// grpc-go allows: there RecvMsg then returns an error); the other calls'
// handlers report their first message on others.
func lateRecvServer(t *testing.T, lateGo chan struct{}, late, others chan recvResult, started chan struct{}) *leangrpc.ClientConn {
	var mu sync.Mutex
	calls := 0
	h := func(_ any, stream grpc.ServerStream) error {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		var m testpb.SimpleRequest
		if n == 1 {
			if err := stream.RecvMsg(&m); err != nil {
				return err
			}
			go func() {
				<-lateGo
				var m testpb.SimpleRequest
				err := stream.RecvMsg(&m)
				late <- recvResult{err, string(m.GetPayload().GetBody())}
			}()
			return nil
		}
		started <- struct{}{}
		for {
			err := stream.RecvMsg(&m)
			others <- recvResult{err, string(m.GetPayload().GetBody())}
			if err != nil {
				return nil
			}
		}
	}
	return lateBidiClient(t, h)
}

func sendBody(t *testing.T, s grpc.ClientStream, body string) {
	t.Helper()
	if err := s.SendMsg(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}}); err != nil {
		t.Fatal(err)
	}
}

// firstCall runs the first call to its end.
func firstCall(t *testing.T, cc *leangrpc.ClientConn) {
	t.Helper()
	s1, err := cc.NewStream(ctxT(t), lateBidiDesc, "/late.S/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	sendBody(t, s1, "first")
	if err := s1.RecvMsg(new(testpb.SimpleResponse)); err != io.EOF {
		t.Fatalf("first call: %v", err)
	}
	time.Sleep(20 * time.Millisecond) // the server released the first stream
}

// TestRecvAfterHandlerReturnReleased: RecvMsg after the handler
// returned, while the call's released h2conn.Stream sits zeroed in the
// connection's free list, must return an error (grpc-go's does), not
// crash the server process.
func TestRecvAfterHandlerReturnReleased(t *testing.T) {
	lateGo, late, others, started := make(chan struct{}), make(chan recvResult, 1), make(chan recvResult, 4), make(chan struct{}, 4)
	cc := lateRecvServer(t, lateGo, late, others, started)
	firstCall(t, cc)
	close(lateGo)
	select {
	case r := <-late:
		if r.err == nil {
			t.Errorf("late RecvMsg got a message %q", r.body)
		} else if status.Code(r.err) != codes.Canceled {
			t.Errorf("late RecvMsg: %v, want Canceled as grpc-go's", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Error("late RecvMsg blocks")
	}
}

// TestRecvAfterHandlerReturnReused: the same late RecvMsg while the
// next call on the connection has reused the released stream object must
// not take that call's message.
func TestRecvAfterHandlerReturnReused(t *testing.T) {
	lateGo, late, others, started := make(chan struct{}), make(chan recvResult, 1), make(chan recvResult, 4), make(chan struct{}, 4)
	cc := lateRecvServer(t, lateGo, late, others, started)
	firstCall(t, cc)
	s2, err := cc.NewStream(ctxT(t), lateBidiDesc, "/late.S/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	sendBody(t, s2, "")
	<-started
	if r := <-others; r.err != nil {
		t.Fatal(r.err)
	}
	// Call 2 took the stream object call 1 released (the free list's
	// last); call 3 another.
	s3, err := cc.NewStream(ctxT(t), lateBidiDesc, "/late.S/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	sendBody(t, s3, "")
	<-started
	if r := <-others; r.err != nil {
		t.Fatal(r.err)
	}
	close(lateGo)
	time.Sleep(50 * time.Millisecond) // the late RecvMsg parks
	sendBody(t, s2, "secret of call 2")
	sendBody(t, s3, "secret of call 3")
	for range 2 {
		select {
		case r := <-others:
			t.Logf("a live handler got %q, %v", r.body, r.err)
		case <-time.After(time.Second):
			t.Log("a live handler got nothing")
		}
	}
	// The late receiver parked before handler 2 re-parked: it is first
	// in line for call 2's next message.
	sendBody(t, s2, "second secret of call 2")
	select {
	case r := <-late:
		if r.err == nil {
			t.Errorf("late RecvMsg of call 1 got another call's message %q", r.body)
		} else if status.Code(r.err) != codes.Canceled {
			t.Errorf("late RecvMsg: %v, want Canceled as grpc-go's", r.err)
		}
	case <-time.After(3 * time.Second):
		t.Error("late RecvMsg of call 1 blocks (parked on a stream object another call uses)")
	}
	s2.CloseSend()
	s3.CloseSend()
}

// TestSendAfterHandlerReturn: a goroutine of a bidi handler that keeps
// calling SendMsg while the handler returns (grpc-go: SendMsg then fails)
// must neither crash nor write into another call's stream: sendMsg checks
// finished under mu but writes after unlocking, and Finish releases the
// h2conn.Stream for reuse.
func TestSendAfterHandlerReturn(t *testing.T) {
	h := func(_ any, stream grpc.ServerStream) error {
		var m testpb.SimpleRequest
		if err := stream.RecvMsg(&m); err != nil {
			return err
		}
		body := m.GetPayload().GetBody()
		go func() {
			for {
				if err := stream.SendMsg(&testpb.SimpleResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
					return
				}
			}
		}()
		time.Sleep(time.Duration(len(body)%3) * 100 * time.Microsecond)
		return nil
	}
	bidiCalls(t, lateBidiClient(t, h), func(s grpc.ClientStream, id string) {
		sendBody(t, s, id)
		s.CloseSend()
		for {
			var r testpb.SimpleResponse
			if err := s.RecvMsg(&r); err != nil {
				break
			}
			if got := string(r.GetPayload().GetBody()); got != id {
				t.Errorf("call %s received %q (another call's message)", id, got)
				return
			}
		}
	})
}

// bidiCalls runs 4 workers of 100 bidi calls each on cc, each call with an
// id of its own, and waits for them.
func bidiCalls(t *testing.T, cc *leangrpc.ClientConn, call func(s grpc.ClientStream, id string)) {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				s, err := cc.NewStream(ctxT(t), lateBidiDesc, "/late.S/Bidi")
				if err != nil {
					t.Error(err)
					return
				}
				call(s, fmt.Sprintf("call-%d-%d", w, i))
			}
		}()
	}
	wg.Wait()
}

// TestSendAfterHandlerReturnAcrossConns: the same with one client
// connection per worker and bursts of calls, so that released stream
// objects pass between connections through the process-wide spare pool:
// a message may then reach another client. In practice the late SendMsg
// mostly hits a released, zeroed stream first and the server process dies
// (nil s.conn in h2conn.Stream.waitAsyncLocked).
func TestSendAfterHandlerReturnAcrossConns(t *testing.T) {
	h := func(_ any, stream grpc.ServerStream) error {
		var m testpb.SimpleRequest
		if err := stream.RecvMsg(&m); err != nil {
			return err
		}
		body := m.GetPayload().GetBody()
		go func() {
			for {
				if err := stream.SendMsg(&testpb.SimpleResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
					return
				}
			}
		}()
		time.Sleep(time.Duration(len(body)%3) * 100 * time.Microsecond)
		return nil
	}
	cc := lateBidiClient(t, h)
	addr := cc.Target()
	var mu sync.Mutex
	crossConn, sameConn := 0, 0
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := leangrpc.NewClient(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for round := range 10 {
				var bw sync.WaitGroup
				for i := range 20 {
					bw.Add(1)
					go func() {
						defer bw.Done()
						id := fmt.Sprintf("conn%d-r%d-c%d", w, round, i)
						s, err := c.NewStream(ctxT(t), lateBidiDesc, "/late.S/Bidi")
						if err != nil {
							return
						}
						if s.SendMsg(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(id)}}) != nil {
							return
						}
						s.CloseSend()
						for {
							var r testpb.SimpleResponse
							if err := s.RecvMsg(&r); err != nil {
								return
							}
							if got := string(r.GetPayload().GetBody()); got != id {
								mu.Lock()
								if got[:5] != id[:5] {
									crossConn++
								} else {
									sameConn++
								}
								mu.Unlock()
							}
						}
					}()
				}
				bw.Wait()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if crossConn+sameConn > 0 {
		t.Errorf("messages received by the wrong call: %d from a call of another client connection, %d from another call of the same connection", crossConn, sameConn)
	}
}

// TestLateUseAfterHandlerReturn: once the handler returned, SendMsg,
// RecvMsg and SendHeader on its stream fail with Canceled, as grpc-go's
// do, while the next calls on the connection (which reuse the released
// stream object) are untouched.
func TestLateUseAfterHandlerReturn(t *testing.T) {
	type lateOps struct{ send, recv, header error }
	late := make(chan lateOps, 1)
	var mu sync.Mutex
	var first grpc.ServerStream
	h := func(_ any, stream grpc.ServerStream) error {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = stream
			return nil
		}
		var m testpb.SimpleRequest
		for {
			if err := stream.RecvMsg(&m); err != nil {
				return nil
			}
			if err := stream.SendMsg(&testpb.SimpleResponse{Payload: m.GetPayload()}); err != nil {
				return err
			}
			if first != nil {
				s := first
				first = nil
				late <- lateOps{
					send:   s.SendMsg(&testpb.SimpleResponse{Payload: &testpb.Payload{Body: []byte("late")}}),
					recv:   s.RecvMsg(new(testpb.SimpleRequest)),
					header: s.SendHeader(metadata.Pairs("k", "v")),
				}
			}
		}
	}
	cc := lateBidiClient(t, h)
	s1, err := cc.NewStream(ctxT(t), lateBidiDesc, "/late.S/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.RecvMsg(new(testpb.SimpleResponse)); err != io.EOF {
		t.Fatalf("first call: %v", err)
	}
	time.Sleep(20 * time.Millisecond) // the server released the first stream
	s2, err := cc.NewStream(ctxT(t), lateBidiDesc, "/late.S/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		body := fmt.Sprintf("call 2 message %d", i)
		sendBody(t, s2, body)
		var r testpb.SimpleResponse
		if err := s2.RecvMsg(&r); err != nil {
			t.Fatal(err)
		}
		if got := string(r.GetPayload().GetBody()); got != body {
			t.Errorf("call 2 received %q, want %q", got, body)
		}
		if i == 0 {
			ops := <-late
			for name, err := range map[string]error{"SendMsg": ops.send, "RecvMsg": ops.recv, "SendHeader": ops.header} {
				if status.Code(err) != codes.Canceled {
					t.Errorf("late %s: %v, want Canceled", name, err)
				}
			}
		}
	}
	s2.CloseSend()
	if err := s2.RecvMsg(new(testpb.SimpleResponse)); err != io.EOF {
		t.Errorf("call 2 end: %v", err)
	}
}

// TestClientStreamLateUse: a client stream used after its call ended gets
// the call's end again (SendMsg io.EOF, or Internal after CloseSend;
// RecvMsg the status) and does not
// disturb the calls that follow on the connection.
func TestClientStreamLateUse(t *testing.T) {
	h := func(_ any, stream grpc.ServerStream) error {
		var m testpb.SimpleRequest
		for {
			if err := stream.RecvMsg(&m); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			if string(m.GetPayload().GetBody()) == "fail" {
				return status.Error(codes.Aborted, "asked to fail")
			}
			if err := stream.SendMsg(&testpb.SimpleResponse{Payload: m.GetPayload()}); err != nil {
				return err
			}
		}
	}
	cc := lateBidiClient(t, h)
	ended := make([]grpc.ClientStream, 0, 2)
	for _, body := range []string{"ok", "fail"} {
		s, err := cc.NewStream(ctxT(t), lateBidiDesc, "/late.S/Bidi")
		if err != nil {
			t.Fatal(err)
		}
		sendBody(t, s, body)
		if body == "ok" {
			if err := s.RecvMsg(new(testpb.SimpleResponse)); err != nil {
				t.Fatal(err)
			}
			s.CloseSend()
		}
		for s.RecvMsg(new(testpb.SimpleResponse)) == nil {
		}
		ended = append(ended, s)
	}
	for i := range 3 {
		// A unary call takes and gives back a stream object (and a pooled
		// client stream) meanwhile.
		if err := cc.Invoke(ctxT(t), "/late.S/None", new(testpb.SimpleRequest), new(testpb.SimpleResponse)); status.Code(err) != codes.Unimplemented {
			t.Errorf("unary call: %v", err)
		}
		s, err := cc.NewStream(ctxT(t), lateBidiDesc, "/late.S/Bidi")
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("live %d", i)
		sendBody(t, s, body)
		for j, old := range ended {
			// After CloseSend (call 0's, and the one below) SendMsg is
			// misuse and fails with Internal, as grpc-go's does; before
			// it, the call's end is io.EOF.
			err := old.SendMsg(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("late")}})
			if i == 0 && j == 1 {
				if err != io.EOF {
					t.Errorf("late SendMsg of ended call %d: %v, want io.EOF", j, err)
				}
			} else if status.Code(err) != codes.Internal {
				t.Errorf("late SendMsg of ended call %d after CloseSend: %v, want Internal", j, err)
			}
			err = old.RecvMsg(new(testpb.SimpleResponse))
			if j == 0 && err != io.EOF || j == 1 && status.Code(err) != codes.Aborted {
				t.Errorf("late RecvMsg of ended call %d: %v", j, err)
			}
			old.CloseSend()
		}
		var r testpb.SimpleResponse
		if err := s.RecvMsg(&r); err != nil {
			t.Fatal(err)
		}
		if got := string(r.GetPayload().GetBody()); got != body {
			t.Errorf("live call received %q, want %q", got, body)
		}
		s.CloseSend()
		if err := s.RecvMsg(&r); err != io.EOF {
			t.Errorf("live call end: %v", err)
		}
	}
}

// TestRecvWhileHandlerReturns: a goroutine of a bidi handler that
// keeps calling RecvMsg while the handler returns must neither crash nor
// decode another call's message: the call's parser goes back to a pool
// when the stream is released, and a receive stays a user of the stream
// until its message is decoded, so the release waits for it.
func TestRecvWhileHandlerReturns(t *testing.T) {
	var mismatches atomic.Int32
	h := func(_ any, stream grpc.ServerStream) error {
		var m testpb.SimpleRequest
		if err := stream.RecvMsg(&m); err != nil {
			return err
		}
		id := string(m.GetPayload().GetBody())
		go func() {
			for {
				var m testpb.SimpleRequest
				if err := stream.RecvMsg(&m); err != nil {
					return
				}
				if got := string(m.GetPayload().GetBody()); got != id {
					mismatches.Add(1)
				}
			}
		}()
		time.Sleep(time.Duration(len(id)%3) * 100 * time.Microsecond)
		return nil
	}
	bidiCalls(t, lateBidiClient(t, h), func(s grpc.ClientStream, id string) {
		for range 20 {
			if s.SendMsg(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(id)}}) != nil {
				break
			}
		}
		s.CloseSend()
		for {
			var r testpb.SimpleResponse
			if err := s.RecvMsg(&r); err != nil {
				break
			}
		}
	})
	if n := mismatches.Load(); n != 0 {
		t.Fatalf("%d messages decoded by another call's receiver", n)
	}
}

// TestSendAfterCallEnded: once the call's context has ended, SendMsg
// returns io.EOF on a client-streaming call and nil on a server-streaming
// one (whose stub returns SendMsg's error as the call's), and RecvMsg
// returns the status, as grpc-go's client does.
func TestSendAfterCallEnded(t *testing.T) {
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{}, clientSettings{})
		tests := []struct {
			name    string
			desc    grpc.StreamDesc
			method  string
			wantErr error
		}{
			{"bidi", grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpc.testing.TestService/FullDuplexCall", io.EOF},
			{"server-streaming", grpc.StreamDesc{ServerStreams: true}, "/grpc.testing.TestService/StreamingOutputCall", nil},
		}
		for _, tc := range tests {
			ctx, cancel := context.WithCancel(context.Background())
			cs, err := e.cc.NewStream(ctx, &tc.desc, tc.method)
			if err != nil {
				t.Fatalf("%s: NewStream: %v", tc.name, err)
			}
			cancel()
			time.Sleep(20 * time.Millisecond) // let the cancellation reach the stream
			req := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 1000)}}
			if err := cs.SendMsg(req); err != tc.wantErr {
				t.Errorf("%s: SendMsg after cancel = %v, want %v", tc.name, err, tc.wantErr)
			}
			if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); status.Code(err) != codes.Canceled {
				t.Errorf("%s: RecvMsg after cancel = %v, want code %v", tc.name, err, codes.Canceled)
			}
		}
	})
}
