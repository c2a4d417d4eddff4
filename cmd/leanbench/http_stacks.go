package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/leangrpc/leangrpc"
)

// The stacks of the web protocols and of net/http: a gRPC server's
// ServeHTTP in net/http with grpc-go's client (leangrpc-http,
// grpc-go-http), and the Connect protocol over HTTP/2 with connect-go's
// client against leangrpc's own listener (leangrpc-connect) and against
// connect-go's handler (connect-go). Plaintext HTTP/2 with prior
// knowledge only; each pair has the same client on both sides.
const (
	stackLeanHTTP    = "leangrpc-http"
	stackGrpcHTTP    = "grpc-go-http"
	stackLeanConnect = "leangrpc-connect"
	stackConnectGo   = "connect-go"
)

func init() {
	impls[stackLeanHTTP] = &impl{name: stackLeanHTTP, dial: dialGrpcGoH2,
		newServer: func(sec *benchTLS) grpcServer {
			noTLS(sec, stackLeanHTTP)
			s := leangrpc.NewServer(leangrpc.MaxRecvMsgSize(maxBenchMsg))
			return newHTTPServer(s, s, s.Stop)
		}}
	impls[stackGrpcHTTP] = &impl{name: stackGrpcHTTP, dial: dialGrpcGoH2,
		newServer: func(sec *benchTLS) grpcServer {
			noTLS(sec, stackGrpcHTTP)
			s := grpc.NewServer(grpc.MaxRecvMsgSize(maxBenchMsg))
			return newHTTPServer(s, s, s.Stop)
		}}
	impls[stackLeanConnect] = &impl{name: stackLeanConnect, dial: dialConnect,
		newServer: func(sec *benchTLS) grpcServer {
			noTLS(sec, stackLeanConnect)
			return leangrpc.NewServer(leangrpc.MaxRecvMsgSize(maxBenchMsg))
		}}
	impls[stackConnectGo] = &impl{name: stackConnectGo, dial: dialConnect,
		newServer: func(sec *benchTLS) grpcServer {
			noTLS(sec, stackConnectGo)
			return newHTTPServer(nil, connectGoHandler(), nil)
		}}
}

// noTLS refuses -tls for a stack that runs plaintext only (newServerSafe
// turns the panic into the stack's error).
func noTLS(sec *benchTLS, name string) {
	if sec != nil {
		panic(name + " runs without TLS only")
	}
}

// httpServer is a handler in a net/http server speaking HTTP/2 with prior
// knowledge (and HTTP/1.1), as a grpcServer.
type httpServer struct {
	reg  grpc.ServiceRegistrar // RegisterService goes here; nil: the handler has its services
	hs   *http.Server
	stop func()
}

func newHTTPServer(reg grpc.ServiceRegistrar, h http.Handler, stop func()) *httpServer {
	hs := &http.Server{Handler: h, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	return &httpServer{reg: reg, hs: hs, stop: stop}
}

func (s *httpServer) RegisterService(d *grpc.ServiceDesc, impl any) {
	if s.reg != nil {
		s.reg.RegisterService(d, impl)
	}
}

func (s *httpServer) Serve(lis net.Listener) error {
	if err := s.hs.Serve(lis); err != http.ErrServerClosed {
		return err
	}
	return nil
}

func (s *httpServer) Stop() {
	s.hs.Close()
	if s.stop != nil {
		s.stop()
	}
}

// dialGrpcGoH2 is grpc-go's client, plaintext.
func dialGrpcGoH2(addr string, _ *benchTLS, netDial netDialer) (grpc.ClientConnInterface, func() error, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxBenchMsg))}
	if netDial != nil {
		opts = append(opts, grpc.WithContextDialer(netDial))
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, nil, err
	}
	return cc, cc.Close, nil
}

// The BenchmarkService's procedures.
const (
	procUnary     = "/grpc.testing.BenchmarkService/UnaryCall"
	procStreaming = "/grpc.testing.BenchmarkService/StreamingCall"
)

// connectGoHandler serves benchService's methods with connect-go's
// handlers, which need no generated code.
func connectGoHandler() http.Handler {
	mux := http.NewServeMux()
	svc := benchService{}
	mux.Handle(procUnary, connect.NewUnaryHandler(procUnary,
		func(ctx context.Context, req *connect.Request[testpb.SimpleRequest]) (*connect.Response[testpb.SimpleResponse], error) {
			resp, err := svc.UnaryCall(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}, connect.WithReadMaxBytes(maxBenchMsg)))
	mux.Handle(procStreaming, connect.NewBidiStreamHandler(procStreaming,
		func(ctx context.Context, stream *connect.BidiStream[testpb.SimpleRequest, testpb.SimpleResponse]) error {
			out := &testpb.SimpleResponse{Payload: new(testpb.Payload)}
			for {
				in, err := stream.Receive()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				out.Payload.Body = zeroBody(int(in.GetResponseSize()))
				if err := stream.Send(out); err != nil {
					return err
				}
			}
		}, connect.WithReadMaxBytes(maxBenchMsg)))
	return mux
}

// connectConn is connect-go's client, speaking the Connect protocol over
// HTTP/2 with prior knowledge, as a grpc.ClientConnInterface for the
// BenchmarkService's two methods.
type connectConn struct {
	tr        *http.Transport
	unary     *connect.Client[testpb.SimpleRequest, testpb.SimpleResponse]
	streaming *connect.Client[testpb.SimpleRequest, testpb.SimpleResponse]
}

func dialConnect(addr string, _ *benchTLS, netDial netDialer) (grpc.ClientConnInterface, func() error, error) {
	tr := &http.Transport{Protocols: new(http.Protocols), MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}
	tr.Protocols.SetUnencryptedHTTP2(true)
	if netDial != nil {
		tr.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) { return netDial(ctx, addr) }
	}
	hc := &http.Client{Transport: tr}
	opts := []connect.ClientOption{connect.WithReadMaxBytes(maxBenchMsg)}
	c := &connectConn{tr: tr,
		unary:     connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](hc, "http://"+addr+procUnary, opts...),
		streaming: connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](hc, "http://"+addr+procStreaming, opts...),
	}
	return c, func() error { tr.CloseIdleConnections(); return nil }, nil
}

func (c *connectConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	if method != procUnary {
		return errors.New("connect client: only " + procUnary)
	}
	resp, err := c.unary.CallUnary(ctx, connect.NewRequest(args.(*testpb.SimpleRequest)))
	if err != nil {
		return err
	}
	reply.(*testpb.SimpleResponse).Payload = resp.Msg.Payload
	return nil
}

func (c *connectConn) NewStream(ctx context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	if method != procStreaming {
		return nil, errors.New("connect client: only " + procStreaming)
	}
	return &connectStream{ctx: ctx, s: c.streaming.CallBidiStream(ctx)}, nil
}

// connectStream is a connect-go bidi stream as a grpc.ClientStream.
type connectStream struct {
	ctx  context.Context
	s    *connect.BidiStreamForClient[testpb.SimpleRequest, testpb.SimpleResponse]
	once sync.Once
}

func (s *connectStream) SendMsg(m any) error { return s.s.Send(m.(*testpb.SimpleRequest)) }

func (s *connectStream) RecvMsg(m any) error {
	r, err := s.s.Receive()
	if err != nil {
		if errors.Is(err, io.EOF) {
			s.once.Do(func() { s.s.CloseResponse() })
			return io.EOF
		}
		return err
	}
	m.(*testpb.SimpleResponse).Payload = r.Payload
	return nil
}

func (s *connectStream) CloseSend() error             { return s.s.CloseRequest() }
func (s *connectStream) Header() (metadata.MD, error) { return nil, nil }
func (s *connectStream) Trailer() metadata.MD         { return nil }
func (s *connectStream) Context() context.Context     { return s.ctx }
