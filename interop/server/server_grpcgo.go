//go:build grpcgo_transport

package main

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

const transportName = "grpc-go"

// newServer returns a grpc-go server. This build exists to test the server
// program itself, not leangrpc. maxStreams 0 keeps the default stream limit,
// nil creds serve plaintext.
func newServer(maxStreams uint32, creds credentials.TransportCredentials) server {
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	if maxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(maxStreams))
	}
	return grpc.NewServer(opts...)
}
