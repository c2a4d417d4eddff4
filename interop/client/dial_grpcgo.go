//go:build grpcgo_transport

package main

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const transportName = "grpc-go"

// dial creates a plaintext grpc-go client connection to target. This build
// exists to test the client program itself, not leangrpc.
func dial(target string) (clientConn, error) {
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return cc, nil
}
