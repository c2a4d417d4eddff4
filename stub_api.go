// Package leangrpc is a gRPC transport for Go that runs code written for
// grpc-go: generated stubs, interceptors, status, codes, metadata, codecs and
// credentials. A program switches by changing one constructor:
// grpc.NewServer to leangrpc.NewServer, grpc.NewClient to leangrpc.NewClient.
package leangrpc

// TEMPORARY: signatures only, so that leanbench and the interop programs
// compile while the transport is written. The implementation replaces it.

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc"
)

var errNotImplemented = errors.New("leangrpc: not implemented yet")

// ServerOption configures a Server.
type ServerOption interface{ applyServer(*serverOptions) }

type serverOptions struct{}

// Server is a gRPC server. It implements grpc.ServiceRegistrar.
type Server struct{}

// NewServer returns a server with no services registered.
func NewServer(opts ...ServerOption) *Server { return &Server{} }

// RegisterService registers a service and its implementation; it must be
// called before Serve.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {}

// GetServiceInfo returns the registered services, as grpc.Server does.
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo { return nil }

// Serve accepts connections on lis until Stop or GracefulStop.
func (s *Server) Serve(lis net.Listener) error { return errNotImplemented }

// Stop closes every connection at once.
func (s *Server) Stop() {}

// GracefulStop stops accepting, lets in-flight RPCs finish, then closes.
func (s *Server) GracefulStop() {}

// DialOption configures a ClientConn.
type DialOption interface{ applyDial(*dialOptions) }

type dialOptions struct{}

// ClientConn is a client connection to one target. It implements
// grpc.ClientConnInterface.
type ClientConn struct{}

// NewClient returns a ClientConn for target ("host:port" or
// "passthrough:///host:port"). It connects lazily.
func NewClient(target string, opts ...DialOption) (*ClientConn, error) {
	return nil, errNotImplemented
}

// Invoke performs a unary RPC.
func (cc *ClientConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return errNotImplemented
}

// NewStream begins a streaming RPC.
func (cc *ClientConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errNotImplemented
}

// Close tears the connection down; RPCs in flight fail with Canceled.
func (cc *ClientConn) Close() error { return nil }

var (
	_ grpc.ServiceRegistrar    = (*Server)(nil)
	_ grpc.ClientConnInterface = (*ClientConn)(nil)
)
