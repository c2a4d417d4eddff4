//go:build grpcgo_transport

package main

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

const transportName = "grpc-go"

// dial creates a grpc-go client connection to target. This build
// exists to test the client program itself, not leangrpc.
func dial(target string, creds credentials.TransportCredentials) (clientConn, error) {
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	return cc, nil
}
