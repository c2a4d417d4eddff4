//go:build !grpcgo_transport

package main

import (
	"google.golang.org/grpc/credentials"

	"github.com/leangrpc/leangrpc"
)

const transportName = "leangrpc"

// newServer returns a leangrpc server; maxStreams 0 keeps the default
// stream limit, nil creds serve plaintext.
func newServer(maxStreams uint32, creds credentials.TransportCredentials) server {
	var opts []leangrpc.ServerOption
	if creds != nil {
		opts = append(opts, leangrpc.Creds(creds))
	}
	if maxStreams > 0 {
		opts = append(opts, leangrpc.MaxConcurrentStreams(maxStreams))
	}
	return leangrpc.NewServer(opts...)
}
