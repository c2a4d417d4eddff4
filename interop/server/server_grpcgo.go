//go:build grpcgo_transport

package main

import "google.golang.org/grpc"

const transportName = "grpc-go"

// newServer returns a grpc-go server. This build exists to test the server
// program itself, not leangrpc.
func newServer() server { return grpc.NewServer() }
