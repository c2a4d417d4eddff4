package leangrpc

import (
	"context"

	"google.golang.org/grpc"
)

// chainUnaryServer folds interceptors into one that runs them in order,
// the first outermost, as grpc-go's chaining does.
func chainUnaryServer(is []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return is[0](ctx, req, info, unaryServerNext(is, 0, info, handler))
	}
}

func unaryServerNext(is []grpc.UnaryServerInterceptor, cur int, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) grpc.UnaryHandler {
	if cur == len(is)-1 {
		return final
	}
	return func(ctx context.Context, req any) (any, error) {
		return is[cur+1](ctx, req, info, unaryServerNext(is, cur+1, info, final))
	}
}

func chainStreamServer(is []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return is[0](srv, ss, info, streamServerNext(is, 0, info, handler))
	}
}

func streamServerNext(is []grpc.StreamServerInterceptor, cur int, info *grpc.StreamServerInfo, final grpc.StreamHandler) grpc.StreamHandler {
	if cur == len(is)-1 {
		return final
	}
	return func(srv any, ss grpc.ServerStream) error {
		return is[cur+1](srv, ss, info, streamServerNext(is, cur+1, info, final))
	}
}

func chainUnaryClient(is []grpc.UnaryClientInterceptor) grpc.UnaryClientInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return is[0](ctx, method, req, reply, cc, unaryClientNext(is, 0, invoker), opts...)
	}
}

func unaryClientNext(is []grpc.UnaryClientInterceptor, cur int, final grpc.UnaryInvoker) grpc.UnaryInvoker {
	if cur == len(is)-1 {
		return final
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return is[cur+1](ctx, method, req, reply, cc, unaryClientNext(is, cur+1, final), opts...)
	}
}

func chainStreamClient(is []grpc.StreamClientInterceptor) grpc.StreamClientInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return is[0](ctx, desc, cc, method, streamClientNext(is, 0, streamer), opts...)
	}
}

func streamClientNext(is []grpc.StreamClientInterceptor, cur int, final grpc.Streamer) grpc.Streamer {
	if cur == len(is)-1 {
		return final
	}
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return is[cur+1](ctx, desc, cc, method, streamClientNext(is, cur+1, final), opts...)
	}
}
