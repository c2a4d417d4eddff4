package leangrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// serverSettings are the options a test needs, applied to either server.
type serverSettings struct {
	maxRecv    int
	unary      []grpc.UnaryServerInterceptor
	stream     []grpc.StreamServerInterceptor
	unaryFirst grpc.UnaryServerInterceptor
}

type clientSettings struct {
	unary      []grpc.UnaryClientInterceptor
	unaryFirst grpc.UnaryClientInterceptor
	stream     []grpc.StreamClientInterceptor
}

// pair is a client of one implementation talking to a server of another.
type pair struct {
	name       string
	leanServer bool
	leanClient bool
}

var pairs = []pair{
	{"lean-lean", true, true},
	{"grpc-client_lean-server", true, false},
	{"lean-client_grpc-server", false, true},
}

// env is one running server and one client.
type env struct {
	cc   grpc.ClientConnInterface
	tc   testgrpc.TestServiceClient
	addr string
	stop func()
}

func startServer(t *testing.T, lean bool, ss serverSettings) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	impl := interop.NewTestServer()
	if lean {
		var opts []leangrpc.ServerOption
		if ss.maxRecv != 0 {
			opts = append(opts, leangrpc.MaxRecvMsgSize(ss.maxRecv))
		}
		if ss.unaryFirst != nil {
			opts = append(opts, leangrpc.UnaryInterceptor(ss.unaryFirst))
		}
		opts = append(opts, leangrpc.ChainUnaryInterceptor(ss.unary...), leangrpc.ChainStreamInterceptor(ss.stream...))
		s := leangrpc.NewServer(opts...)
		testgrpc.RegisterTestServiceServer(s, impl)
		done := make(chan struct{})
		go func() { defer close(done); s.Serve(lis) }()
		return lis.Addr().String(), func() { s.Stop(); <-done }
	}
	var opts []grpc.ServerOption
	if ss.maxRecv != 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(ss.maxRecv))
	}
	if ss.unaryFirst != nil {
		opts = append(opts, grpc.UnaryInterceptor(ss.unaryFirst))
	}
	opts = append(opts, grpc.ChainUnaryInterceptor(ss.unary...), grpc.ChainStreamInterceptor(ss.stream...))
	s := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(s, impl)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	return lis.Addr().String(), func() { s.Stop(); <-done }
}

func newClient(t *testing.T, lean bool, addr string, cs clientSettings) (grpc.ClientConnInterface, func()) {
	t.Helper()
	if lean {
		opts := []leangrpc.DialOption{leangrpc.WithTransportCredentials(insecure.NewCredentials())}
		if cs.unaryFirst != nil {
			opts = append(opts, leangrpc.WithUnaryInterceptor(cs.unaryFirst))
		}
		opts = append(opts, leangrpc.WithChainUnaryInterceptor(cs.unary...), leangrpc.WithChainStreamInterceptor(cs.stream...))
		cc, err := leangrpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return cc, func() { cc.Close() }
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cs.unaryFirst != nil {
		opts = append(opts, grpc.WithUnaryInterceptor(cs.unaryFirst))
	}
	opts = append(opts, grpc.WithChainUnaryInterceptor(cs.unary...), grpc.WithChainStreamInterceptor(cs.stream...))
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cc, func() { cc.Close() }
}

func setup(t *testing.T, p pair, ss serverSettings, cs clientSettings) *env {
	t.Helper()
	addr, stopServer := startServer(t, p.leanServer, ss)
	cc, closeClient := newClient(t, p.leanClient, addr, cs)
	e := &env{cc: cc, tc: testgrpc.NewTestServiceClient(cc), addr: addr}
	e.stop = func() { closeClient(); stopServer() }
	t.Cleanup(e.stop)
	return e
}

// forPairs runs f once per pair, checking that goroutines return to their
// baseline afterwards.
func forPairs(t *testing.T, f func(t *testing.T, p pair)) { forPairsIn(t, pairs, f) }

// forPairsIn runs f once per pairing of list, checking that goroutines and
// pool buffers return to their baseline afterwards.
func forPairsIn(t *testing.T, list []pair, f func(t *testing.T, p pair)) {
	sockio.StartIdlePoller() // process-wide, started before the baseline
	for _, p := range list {
		t.Run(p.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			bufs := bufpool.Default().Outstanding()
			t.Run("body", func(t *testing.T) { f(t, p) })
			checkGoroutines(t, base)
			checkBuffers(t, bufs)
		})
	}
}

func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("goroutines: %d after the test, %d before\n%s", n, base, buf)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkBuffers waits for the default pool's outstanding buffers to return
// to base: every read and write buffer of the closed connections, and
// every received message, was freed.
func checkBuffers(t *testing.T, base int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := bufpool.Default().Outstanding()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("pool buffers: %d outstanding after the test, %d before", n, base)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func payload(n int) *testpb.Payload {
	return &testpb.Payload{Type: testpb.PayloadType_COMPRESSABLE, Body: make([]byte, n)}
}

func TestUnary(t *testing.T) {
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{}, clientSettings{})
		ctx := ctxT(t)
		if _, err := e.tc.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall: %v", err)
		}
		for _, size := range []int{0, 1, 1000, 16 << 10, 271828, 3 << 20} {
			reply, err := e.tc.UnaryCall(ctx, &testpb.SimpleRequest{
				ResponseType: testpb.PayloadType_COMPRESSABLE,
				ResponseSize: int32(size / 2),
				Payload:      payload(size),
			})
			if err != nil {
				t.Fatalf("UnaryCall(%d): %v", size, err)
			}
			if len(reply.GetPayload().GetBody()) != size/2 {
				t.Fatalf("UnaryCall(%d): reply of %d bytes", size, len(reply.GetPayload().GetBody()))
			}
		}
		// Many concurrent calls on one connection.
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 100, Payload: payload(100)}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("concurrent UnaryCall: %v", err)
		}
	})
}

func TestStreaming(t *testing.T) {
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{}, clientSettings{})
		ctx := ctxT(t)

		// Client streaming.
		sizes := []int{27182, 8, 1828, 45904}
		cs, err := e.tc.StreamingInputCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range sizes {
			if err := cs.Send(&testpb.StreamingInputCallRequest{Payload: payload(n)}); err != nil {
				t.Fatalf("Send: %v", err)
			}
		}
		reply, err := cs.CloseAndRecv()
		if err != nil || reply.GetAggregatedPayloadSize() != 74922 {
			t.Fatalf("CloseAndRecv = %v, %v; want 74922", reply.GetAggregatedPayloadSize(), err)
		}

		// Server streaming.
		var params []*testpb.ResponseParameters
		for _, n := range []int{31415, 9, 2653, 58979} {
			params = append(params, &testpb.ResponseParameters{Size: int32(n)})
		}
		ss, err := e.tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params})
		if err != nil {
			t.Fatal(err)
		}
		for i, prm := range params {
			r, err := ss.Recv()
			if err != nil || len(r.GetPayload().GetBody()) != int(prm.Size) {
				t.Fatalf("Recv %d: %d bytes, %v", i, len(r.GetPayload().GetBody()), err)
			}
		}
		if _, err := ss.Recv(); err != io.EOF {
			t.Fatalf("Recv at end: %v, want io.EOF", err)
		}

		// Ping-pong.
		bidi, err := e.tc.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range []int{31415, 9, 2653, 58979} {
			if err := bidi.Send(&testpb.StreamingOutputCallRequest{
				ResponseParameters: []*testpb.ResponseParameters{{Size: int32(n)}},
				Payload:            payload(n / 2),
			}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
			r, err := bidi.Recv()
			if err != nil || len(r.GetPayload().GetBody()) != n {
				t.Fatalf("Recv %d: %d bytes, %v", i, len(r.GetPayload().GetBody()), err)
			}
		}
		bidi.CloseSend()
		if _, err := bidi.Recv(); err != io.EOF {
			t.Fatalf("bidi end: %v", err)
		}

		// Empty stream.
		empty, err := e.tc.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		empty.CloseSend()
		if _, err := empty.Recv(); err != io.EOF {
			t.Fatalf("empty stream: %v, want io.EOF", err)
		}
	})
}

func TestMetadata(t *testing.T) {
	const (
		initKey  = "x-grpc-test-echo-initial"
		trailKey = "x-grpc-test-echo-trailing-bin"
	)
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{}, clientSettings{})
		ctx := metadata.NewOutgoingContext(ctxT(t), metadata.Pairs(initKey, "test_initial_metadata_value", trailKey, "\x0a\x0b\x0a\x0b\x0a\x0b"))
		var header, trailer metadata.MD
		if _, err := e.tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 1, Payload: payload(1)}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatal(err)
		}
		if got := header.Get(initKey); len(got) != 1 || got[0] != "test_initial_metadata_value" {
			t.Errorf("header %v", header)
		}
		if got := trailer.Get(trailKey); len(got) != 1 || got[0] != "\x0a\x0b\x0a\x0b\x0a\x0b" {
			t.Errorf("trailer %v", trailer)
		}
		stream, err := e.tc.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 1}}}); err != nil {
			t.Fatal(err)
		}
		h, err := stream.Header()
		if err != nil || h.Get(initKey)[0] != "test_initial_metadata_value" {
			t.Fatalf("stream header %v, %v", h, err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		stream.CloseSend()
		if _, err := stream.Recv(); err != io.EOF {
			t.Fatal(err)
		}
		if got := stream.Trailer().Get(trailKey); len(got) != 1 || got[0] != "\x0a\x0b\x0a\x0b\x0a\x0b" {
			t.Errorf("stream trailer %v", stream.Trailer())
		}
	})
}

func TestStatus(t *testing.T) {
	// An interceptor answers with a status with details when asked to.
	withDetails := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("want-details")) > 0 {
			st, _ := status.New(codes.FailedPrecondition, "with details").WithDetails(&errdetails.ErrorInfo{Reason: "r", Domain: "d"})
			return nil, st.Err()
		}
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("want-plain-error")) > 0 {
			return nil, errors.New("plain error")
		}
		return handler(ctx, req)
	}
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{unary: []grpc.UnaryServerInterceptor{withDetails}}, clientSettings{})
		ctx := ctxT(t)
		for _, msg := range []string{"test status message", "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n", "100% sure"} {
			_, err := e.tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: 2, Message: msg}})
			if st := status.Convert(err); st.Code() != codes.Unknown || st.Message() != msg {
				t.Errorf("unary status = %v %q, want Unknown %q", st.Code(), st.Message(), msg)
			}
		}
		stream, err := e.tc.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stream.Send(&testpb.StreamingOutputCallRequest{ResponseStatus: &testpb.EchoStatus{Code: 9, Message: "stream status"}})
		stream.CloseSend()
		if _, err := stream.Recv(); status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "stream status" {
			t.Errorf("stream status %v", err)
		}

		_, err = e.tc.EmptyCall(metadata.AppendToOutgoingContext(ctx, "want-details", "1"), &testpb.Empty{})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || len(st.Details()) != 1 {
			t.Fatalf("details: %v (%d details)", err, len(st.Details()))
		}
		if info, ok := st.Details()[0].(*errdetails.ErrorInfo); !ok || info.Reason != "r" {
			t.Errorf("detail %v", st.Details()[0])
		}
		_, err = e.tc.EmptyCall(metadata.AppendToOutgoingContext(ctx, "want-plain-error", "1"), &testpb.Empty{})
		if st := status.Convert(err); st.Code() != codes.Unknown || st.Message() != "plain error" {
			t.Errorf("plain error: %v", err)
		}
	})
}

func TestUnimplemented(t *testing.T) {
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{}, clientSettings{})
		ctx := ctxT(t)
		err := e.cc.Invoke(ctx, "/grpc.testing.TestService/UnimplementedCall", &testpb.Empty{}, &testpb.Empty{})
		if st := status.Convert(err); st.Code() != codes.Unimplemented {
			t.Errorf("unknown method: %v", err)
		}
		err = e.cc.Invoke(ctx, "/grpc.testing.UnimplementedService/UnimplementedCall", &testpb.Empty{}, &testpb.Empty{})
		if st := status.Convert(err); st.Code() != codes.Unimplemented {
			t.Errorf("unknown service: %v", err)
		}
		if p.leanServer {
			err = e.cc.Invoke(ctx, "/grpc.testing.TestService/Nope", &testpb.Empty{}, &testpb.Empty{})
			if want := "unknown method Nope for service grpc.testing.TestService"; status.Convert(err).Message() != want {
				t.Errorf("message %q, want %q", status.Convert(err).Message(), want)
			}
			err = e.cc.Invoke(ctx, "/x.Y/Z", &testpb.Empty{}, &testpb.Empty{})
			if want := "unknown service x.Y"; status.Convert(err).Message() != want {
				t.Errorf("message %q, want %q", status.Convert(err).Message(), want)
			}
		}
	})
}

func TestDeadlineAndCancel(t *testing.T) {
	handlerEnded := make(chan error, 16)
	sleeper := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("sleep")) > 0 {
			<-ctx.Done()
			handlerEnded <- ctx.Err()
			return nil, ctx.Err()
		}
		return handler(ctx, req)
	}
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{unary: []grpc.UnaryServerInterceptor{sleeper}}, clientSettings{})

		// Deadline on a sleeping server (unary): the handler's context
		// ends too.
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "sleep", "1"), 50*time.Millisecond)
		_, err := e.tc.EmptyCall(ctx, &testpb.Empty{})
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("deadline: %v, want DeadlineExceeded", err)
		}
		select {
		case err := <-handlerEnded:
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Errorf("handler context ended with %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("server handler's context did not end after the deadline")
		}

		// Cancel while the server sleeps.
		ctx, cancel = context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "sleep", "1"))
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		_, err = e.tc.EmptyCall(ctx, &testpb.Empty{})
		if status.Code(err) != codes.Canceled {
			t.Errorf("cancel: %v, want Canceled", err)
		}
		select {
		case err := <-handlerEnded:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("handler context ended with %v, want Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("server handler's context did not end after the client canceled")
		}

		// Timeout on a sleeping streaming server (interop
		// timeout_on_sleeping_server).
		ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
		stream, err := e.tc.FullDuplexCall(ctx)
		if err == nil {
			err = stream.Send(&testpb.StreamingOutputCallRequest{Payload: payload(27182)})
			if err == nil || err == io.EOF {
				_, err = stream.Recv()
			}
		}
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("sleeping server: %v, want DeadlineExceeded", err)
		}

		// cancel_after_begin and cancel_after_first_response.
		ctx, cancel = context.WithCancel(context.Background())
		in, err := e.tc.StreamingInputCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := in.CloseAndRecv(); status.Code(err) != codes.Canceled {
			t.Errorf("cancel after begin: %v", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		bidi, err := e.tc.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bidi.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 31415}}, Payload: payload(27182)})
		if _, err := bidi.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := bidi.Recv(); status.Code(err) != codes.Canceled {
			t.Errorf("cancel after first response: %v", err)
		}
	})
}

func TestMessageSizeLimits(t *testing.T) {
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{maxRecv: 1024}, clientSettings{})
		ctx := ctxT(t)
		_, err := e.tc.UnaryCall(ctx, &testpb.SimpleRequest{Payload: payload(2048)})
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("request over the server's limit: %v", err)
		}
		_, err = e.tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 2048}, grpc.MaxCallRecvMsgSize(1024))
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("response over the client's limit: %v", err)
		}
		_, err = e.tc.UnaryCall(ctx, &testpb.SimpleRequest{Payload: payload(2048)}, grpc.MaxCallSendMsgSize(1024))
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("request over the client's send limit: %v", err)
		}
		// The connection is still usable.
		if _, err := e.tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 10, Payload: payload(10)}); err != nil {
			t.Errorf("after limits: %v", err)
		}
		// The default receive limit is 4 MiB.
		_, err = e.tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 5 << 20})
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("response over the default limit: %v", err)
		}
	})
}

func TestInterceptorOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	record := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	si := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			record("server-" + name + ":" + info.FullMethod)
			return h(ctx, req)
		}
	}
	ci := func(name string) grpc.UnaryClientInterceptor {
		return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			record("client-" + name)
			return inv(ctx, method, req, reply, cc, opts...)
		}
	}
	var streamOrder []string
	ssi := func(name string) grpc.StreamServerInterceptor {
		return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			mu.Lock()
			streamOrder = append(streamOrder, name+":"+info.FullMethod)
			mu.Unlock()
			return h(srv, ss)
		}
	}
	csi := func(name string) grpc.StreamClientInterceptor {
		return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			mu.Lock()
			streamOrder = append(streamOrder, "client-"+name)
			mu.Unlock()
			return streamer(ctx, desc, cc, method, opts...)
		}
	}
	forPairs(t, func(t *testing.T, p pair) {
		order, streamOrder = nil, nil
		e := setup(t, p,
			serverSettings{unaryFirst: si("first"), unary: []grpc.UnaryServerInterceptor{si("a"), si("b")}, stream: []grpc.StreamServerInterceptor{ssi("s1"), ssi("s2")}},
			clientSettings{unaryFirst: ci("first"), unary: []grpc.UnaryClientInterceptor{ci("a"), ci("b")}, stream: []grpc.StreamClientInterceptor{csi("1"), csi("2")}})
		ctx := ctxT(t)
		if _, err := e.tc.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		const m = ":/grpc.testing.TestService/EmptyCall"
		want := []string{"client-first", "client-a", "client-b", "server-first" + m, "server-a" + m, "server-b" + m}
		mu.Lock()
		got := fmt.Sprint(order)
		mu.Unlock()
		if got != fmt.Sprint(want) {
			t.Errorf("unary order %v, want %v", got, want)
		}
		s, err := e.tc.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.CloseSend()
		if _, err := s.Recv(); err != io.EOF {
			t.Fatal(err)
		}
		const sm = ":/grpc.testing.TestService/FullDuplexCall"
		mu.Lock()
		got = fmt.Sprint(streamOrder)
		mu.Unlock()
		if want := fmt.Sprint([]string{"client-1", "client-2", "s1" + sm, "s2" + sm}); got != want {
			t.Errorf("stream order %v, want %v", got, want)
		}
	})
}

// TestHandlerContext checks what a handler sees: incoming metadata, peer,
// method, deadline, and grpc.SetHeader/SendHeader/SetTrailer.
func TestHandlerContext(t *testing.T) {
	type seen struct {
		method   string
		peer     string
		hasDL    bool
		ua       string
		custom   string
		authorty string
	}
	got := make(chan seen, 4)
	inspect := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		var s seen
		s.method, _ = grpc.Method(ctx)
		if p, ok := peer.FromContext(ctx); ok {
			s.peer = p.Addr.String()
		}
		_, s.hasDL = ctx.Deadline()
		md, _ := metadata.FromIncomingContext(ctx)
		s.ua = strings.Join(md.Get("user-agent"), ",")
		s.custom = strings.Join(md.Get("x-custom"), ",")
		s.authorty = strings.Join(md.Get(":authority"), ",")
		got <- s
		grpc.SetHeader(ctx, metadata.Pairs("h1", "v1"))
		grpc.SendHeader(ctx, metadata.Pairs("h2", "v2"))
		grpc.SetTrailer(ctx, metadata.Pairs("t1", "v1"))
		return h(ctx, req)
	}
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{unary: []grpc.UnaryServerInterceptor{inspect}}, clientSettings{})
		ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-custom", "c")
		var header, trailer metadata.MD
		var pr peer.Peer
		if _, err := e.tc.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&pr)); err != nil {
			t.Fatal(err)
		}
		s := <-got
		if s.method != "/grpc.testing.TestService/EmptyCall" || s.peer == "" || !s.hasDL || s.custom != "c" || s.ua == "" || s.authorty != e.addr {
			t.Errorf("handler saw %+v", s)
		}
		if p.leanClient && !strings.HasPrefix(s.ua, "leangrpc-go/") {
			t.Errorf("user-agent %q", s.ua)
		}
		if header.Get("h1")[0] != "v1" || header.Get("h2")[0] != "v2" || trailer.Get("t1")[0] != "v1" {
			t.Errorf("header %v trailer %v", header, trailer)
		}
		if pr.Addr == nil || pr.Addr.String() != e.addr {
			t.Errorf("peer %v, want %s", pr.Addr, e.addr)
		}
	})
}

func TestFailFastAndWaitForReady(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	cc, err := leangrpc.NewClient(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	tc := testgrpc.NewTestServiceClient(cc)
	ctx := ctxT(t)
	if _, err := tc.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.Unavailable {
		t.Errorf("fail fast: %v, want Unavailable", err)
	}
	// During the backoff the call fails too, without waiting.
	if _, err := tc.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.Unavailable {
		t.Errorf("fail fast in backoff: %v", err)
	}
	// WaitForReady waits until the context ends.
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := tc.EmptyCall(wctx, &testpb.Empty{}, grpc.WaitForReady(true)); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("wait for ready: %v, want DeadlineExceeded", err)
	}
}

func TestServerAPI(t *testing.T) {
	s := leangrpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	info := s.GetServiceInfo()
	ts, ok := info["grpc.testing.TestService"]
	if !ok || len(ts.Methods) != 8 {
		t.Fatalf("GetServiceInfo = %v", info)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "duplicate service") {
				t.Errorf("duplicate registration: %v", r)
			}
		}()
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	}()
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "does not satisfy") {
				t.Errorf("wrong impl: %v", r)
			}
		}()
		s.RegisterService(&testgrpc.UnimplementedService_ServiceDesc, struct{}{})
	}()
}
