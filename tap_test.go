package leangrpc_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

type tapKey struct{}

// TestInTapHandle runs a tap handle on both servers with both clients:
// it sees the method and the metadata, the context it returns reaches
// the interceptors, and its error answers the call (a plain error as
// PermissionDenied, a status error as itself) without running them.
func TestInTapHandle(t *testing.T) {
	forAllPairs(t, func(t *testing.T, p pair) {
		var intercepted atomic.Int32
		handle := func(ctx context.Context, info *tap.Info) (context.Context, error) {
			switch strings.Join(info.Header.Get("x-tap"), ",") {
			case "plain":
				return nil, errors.New("tap says no")
			case "status":
				return nil, status.Error(codes.ResourceExhausted, "over quota")
			}
			return context.WithValue(ctx, tapKey{}, info.FullMethodName), nil
		}
		check := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			intercepted.Add(1)
			if m, _ := ctx.Value(tapKey{}).(string); m != "/grpc.testing.TestService/EmptyCall" {
				return nil, status.Errorf(codes.FailedPrecondition, "tap value %q", m)
			}
			return h(ctx, req)
		}
		tc := startTestService(t, p, stackOptions{
			leanServer: []leangrpc.ServerOption{leangrpc.InTapHandle(handle), leangrpc.UnaryInterceptor(check)},
			grpcServer: []grpc.ServerOption{grpc.InTapHandle(handle), grpc.UnaryInterceptor(check)},
		})
		if _, err := tc.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
			t.Fatalf("call the tap lets through: %v", err)
		}
		for _, c := range []struct {
			tap  string
			code codes.Code
			msg  string
		}{
			{"plain", codes.PermissionDenied, "tap says no"},
			{"status", codes.ResourceExhausted, "over quota"},
		} {
			ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-tap", c.tap)
			_, err := tc.EmptyCall(ctx, &testpb.Empty{})
			if st := status.Convert(err); st.Code() != c.code || st.Message() != c.msg {
				t.Errorf("tap error %s: %v, want %v %q", c.tap, err, c.code, c.msg)
			}
		}
		if n := intercepted.Load(); n != 1 {
			t.Errorf("the interceptor ran %d times, want once (refused calls run nothing)", n)
		}
	})
}
