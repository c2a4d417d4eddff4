package main

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// benchService is the BenchmarkService implementation that every stack
// serves. It answers with a payload of the requested size. Unlike
// benchmain's server it does not allocate a new body per response: bodies
// are zero-filled read-only slices of one shared array, so that the
// allocation figures show the transport and codec rather than the handler.
type benchService struct {
	testpb.UnimplementedBenchmarkServiceServer
}

func (benchService) UnaryCall(_ context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: zeroBody(int(in.GetResponseSize()))}}, nil
}

func (benchService) StreamingCall(stream testpb.BenchmarkService_StreamingCallServer) error {
	// Reuse the request and response objects across messages, as benchmain
	// does.
	in := new(testpb.SimpleRequest)
	out := &testpb.SimpleResponse{Payload: new(testpb.Payload)}
	for {
		if err := stream.RecvMsg(in); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		out.Payload.Body = zeroBody(int(in.GetResponseSize()))
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

var (
	zerosMu sync.Mutex
	zeros   atomic.Pointer[[]byte] // grows only; never written after creation
)

// zeroBody returns n zero bytes that must not be modified.
func zeroBody(n int) []byte {
	if n <= 0 {
		return nil
	}
	if z := zeros.Load(); z != nil && len(*z) >= n {
		return (*z)[:n:n]
	}
	zerosMu.Lock()
	defer zerosMu.Unlock()
	if z := zeros.Load(); z != nil && len(*z) >= n {
		return (*z)[:n:n]
	}
	z := make([]byte, n)
	zeros.Store(&z)
	return z[:n:n]
}
