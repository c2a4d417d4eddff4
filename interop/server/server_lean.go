//go:build !grpcgo_transport

package main

import "github.com/leangrpc/leangrpc"

const transportName = "leangrpc"

// newServer returns a leangrpc server; maxStreams 0 keeps the default
// stream limit.
func newServer(maxStreams uint32) server {
	var opts []leangrpc.ServerOption
	if maxStreams > 0 {
		opts = append(opts, leangrpc.MaxConcurrentStreams(maxStreams))
	}
	return leangrpc.NewServer(opts...)
}
