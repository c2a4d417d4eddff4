package leangrpc_test

import (
	"context"
	"runtime"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// BenchmarkUnary/<pair>: one unary call with a 1 KiB request and response.
func BenchmarkUnary(b *testing.B) {
	all := append([]pair{{"grpc-grpc", false, false}}, pairs...)
	for _, p := range all {
		b.Run(p.name, func(b *testing.B) {
			tc := benchService(b, p)
			ctx := context.Background()
			req := &testpb.SimpleRequest{ResponseSize: 1024, Payload: payload(1024)}
			if _, err := tc.UnaryCall(ctx, req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStreamPingPong/<pair>: one round trip of 1 KiB on a bidi stream.
func BenchmarkStreamPingPong(b *testing.B) {
	all := append([]pair{{"grpc-grpc", false, false}}, pairs...)
	for _, p := range all {
		b.Run(p.name, func(b *testing.B) {
			tc := benchService(b, p)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := tc.FullDuplexCall(ctx)
			if err != nil {
				b.Fatal(err)
			}
			req := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 1024}}, Payload: payload(1024)}
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Send(req); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Recv(); err != nil {
					b.Fatal(err)
				}
			}
			s.CloseSend()
			s.Recv()
		})
	}
}

// benchService starts a server and a client of pair p, both stopped when
// the benchmark ends, and returns the client's TestService stub.
func benchService(b *testing.B, p pair) testgrpc.TestServiceClient {
	addr, stop := startServerB(b, p.leanServer)
	b.Cleanup(stop)
	cc, closeCC := newClientB(b, p.leanClient, addr)
	b.Cleanup(closeCC)
	return testgrpc.NewTestServiceClient(cc)
}

func startServerB(b *testing.B, lean bool) (string, func()) {
	t := &testing.T{}
	addr, stop := startServer(t, lean, serverSettings{})
	if t.Failed() {
		b.Fatal("server did not start")
	}
	return addr, stop
}

func newClientB(b *testing.B, lean bool, addr string) (grpc.ClientConnInterface, func()) {
	t := &testing.T{}
	cc, closeCC := newClient(t, lean, addr, clientSettings{})
	if t.Failed() {
		b.Fatal("client did not start")
	}
	return cc, closeCC
}

// BenchmarkStreamLarge/<pair>: one round trip of 1 MB each way on a bidi
// stream.
func BenchmarkStreamLarge(b *testing.B) {
	all := append([]pair{{"grpc-grpc", false, false}}, pairs...)
	for _, p := range all {
		b.Run(p.name, func(b *testing.B) {
			tc := benchService(b, p)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := tc.FullDuplexCall(ctx)
			if err != nil {
				b.Fatal(err)
			}
			req := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 1 << 20}}, Payload: payload(1 << 20)}
			b.SetBytes(2 << 20)
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Send(req); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Recv(); err != nil {
					b.Fatal(err)
				}
			}
			s.CloseSend()
			s.Recv()
		})
	}
}

// BenchmarkUnaryParallel/<pair>: 100-byte unary calls, 120 in flight on one
// connection, as leanbench's "unary ×120" row; run it with -mutexprofile or
// -blockprofile to see where calls wait.
func BenchmarkUnaryParallel(b *testing.B) {
	all := append([]pair{{"grpc-grpc", false, false}}, pairs...)
	for _, p := range all {
		b.Run(p.name, func(b *testing.B) {
			tc := benchService(b, p)
			ctx := context.Background()
			req := &testpb.SimpleRequest{ResponseSize: 100, Payload: payload(100)}
			if _, err := tc.UnaryCall(ctx, req); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism((120 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := tc.UnaryCall(ctx, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
