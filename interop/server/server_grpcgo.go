//go:build grpcgo_transport

package main

import "google.golang.org/grpc"

const transportName = "grpc-go"

// newServer returns a grpc-go server. This build exists to test the server
// program itself, not leangrpc. maxStreams 0 keeps the default stream limit.
func newServer(maxStreams uint32) server {
	var opts []grpc.ServerOption
	if maxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(maxStreams))
	}
	return grpc.NewServer(opts...)
}
