package leangrpc_test

import (
	"context"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

func serve(t *testing.T, opts ...leangrpc.ServerOption) (*leangrpc.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	reflection.Register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return s, lis.Addr().String()
}

// TestReflection runs grpc-go's reflection service, registered through
// GetServiceInfo, over a leangrpc server.
func TestReflection(t *testing.T) {
	_, addr := serve(t)
	cc, err := leangrpc.NewClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "grpc.testing.TestService") || !slices.Contains(names, "grpc.reflection.v1.ServerReflection") {
		t.Errorf("services %v", names)
	}
	stream.CloseSend()
}

func TestServerSendLimitAndConcurrentStreams(t *testing.T) {
	_, addr := serve(t, leangrpc.MaxSendMsgSize(1000), leangrpc.MaxConcurrentStreams(1))
	c := leanClient(t, addr)
	ctx := ctxT(t)
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 2000}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("response over the server's send limit: %v", err)
	}
	// One stream at a time: a second call waits for the first to end.
	first, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	second := make(chan error, 1)
	go func() {
		_, err := c.EmptyCall(ctx, &testpb.Empty{})
		done.Store(true)
		second <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if done.Load() {
		t.Error("a second stream ran while MaxConcurrentStreams(1) was taken")
	}
	first.CloseSend()
	if _, err := first.Recv(); err != io.EOF {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Errorf("second call after the first ended: %v", err)
	}
}

func TestDialOptions(t *testing.T) {
	var gotUA, gotAuthority string
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		gotUA = strings.Join(md.Get("user-agent"), ",")
		gotAuthority = strings.Join(md.Get(":authority"), ",")
		return h(ctx, req)
	}
	_, addr := serve(t, leangrpc.UnaryInterceptor(record))
	var dialed atomic.Int32
	dialer := func(ctx context.Context, a string) (net.Conn, error) {
		dialed.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", a)
	}
	cc, err := leangrpc.NewClient("passthrough:///"+addr,
		leangrpc.WithTransportCredentials(insecure.NewCredentials()),
		leangrpc.WithContextDialer(dialer),
		leangrpc.WithUserAgent("my-app/1.0"),
		leangrpc.WithAuthority("example.test"),
		leangrpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(100)),
		leangrpc.WithInitialWindowSize(1<<16),
		leangrpc.WithInitialConnWindowSize(1<<20),
		leangrpc.WithReadBufferPooling(false),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testgrpc.NewTestServiceClient(cc)
	if _, err := c.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if dialed.Load() != 1 || !strings.HasPrefix(gotUA, "my-app/1.0 leangrpc-go/") || gotAuthority != "example.test" {
		t.Errorf("dialed %d, user-agent %q, authority %q", dialed.Load(), gotUA, gotAuthority)
	}
	// The default call option limits responses; a call's own option wins.
	if _, err := c.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 1000}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("default MaxCallRecvMsgSize: %v", err)
	}
	if _, err := c.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 1000}, grpc.MaxCallRecvMsgSize(1<<20)); err != nil {
		t.Errorf("call option over the default: %v", err)
	}
}

// TestServerMaxConnectionIdle checks the keepalive wiring: the server
// closes an idle connection (GOAWAY) and the client dials again for the
// next call.
func TestServerMaxConnectionIdle(t *testing.T) {
	_, addr := serve(t, leangrpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 100 * time.Millisecond}))
	var dialed atomic.Int32
	cc, err := leangrpc.NewClient(addr, leangrpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
		dialed.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", a)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testgrpc.NewTestServiceClient(cc)
	if _, err := c.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(150 * time.Millisecond)
		if _, err := c.EmptyCall(ctxT(t), &testpb.Empty{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("call after the idle close: %v", err)
		}
		if dialed.Load() >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if dialed.Load() < 2 {
		t.Errorf("dialed %d times: the idle connection was not closed", dialed.Load())
	}
}

// tokenCreds is a per-RPC credential sending a bearer token.
type tokenCreds struct {
	token  string
	secure bool
}

func (c tokenCreds) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	return map[string]string{"Authorization": "Bearer " + c.token, "x-audience": strings.Join(uri, ",")}, nil
}
func (c tokenCreds) RequireTransportSecurity() bool { return c.secure }

func TestPerRPCCredentials(t *testing.T) {
	got := make(chan metadata.MD, 2)
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got <- md
		return h(ctx, req)
	}
	_, addr := serve(t, leangrpc.UnaryInterceptor(record))
	cc, err := leangrpc.NewClient(addr, leangrpc.WithPerRPCCredentials(tokenCreds{token: "conn"}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testgrpc.NewTestServiceClient(cc)
	if _, err := c.EmptyCall(ctxT(t), &testpb.Empty{}, grpc.PerRPCCredentials(tokenCreds{token: "call"})); err != nil {
		t.Fatal(err)
	}
	md := <-got
	if a := md.Get("authorization"); len(a) != 2 || a[0] != "Bearer conn" || a[1] != "Bearer call" {
		t.Errorf("authorization %v", a)
	}
	if a := md.Get("x-audience"); len(a) == 0 || a[0] != "https://"+addr+"/grpc.testing.TestService" {
		t.Errorf("audience %v", a)
	}
	// Credentials that need transport security are refused over plaintext.
	if _, err := c.EmptyCall(ctxT(t), &testpb.Empty{}, grpc.PerRPCCredentials(tokenCreds{token: "x", secure: true})); status.Code(err) != codes.Unauthenticated {
		t.Errorf("secure creds over plaintext: %v", err)
	}
	if _, err := leangrpc.NewClient(addr, leangrpc.WithPerRPCCredentials(tokenCreds{secure: true})); err == nil {
		t.Error("NewClient accepted secure per-RPC credentials over plaintext")
	}
}

func TestUnknownServiceHandler(t *testing.T) {
	h := func(srv any, stream grpc.ServerStream) error {
		m, _ := grpc.MethodFromServerStream(stream)
		var req testpb.Empty
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		return status.Error(codes.Aborted, "proxied "+m)
	}
	_, addr := serve(t, leangrpc.UnknownServiceHandler(h))
	cc, err := leangrpc.NewClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, m := range []string{"/no.Such/Method", "/grpc.testing.TestService/Nope"} {
		err := cc.Invoke(ctxT(t), m, &testpb.Empty{}, &testpb.Empty{})
		if st := status.Convert(err); st.Code() != codes.Aborted || st.Message() != "proxied "+m {
			t.Errorf("%s: %v", m, err)
		}
	}
	// Registered methods still go to their handlers.
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
		t.Error(err)
	}
}
