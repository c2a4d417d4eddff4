//go:build !grpcgo_transport

package main

import (
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leangrpc/leangrpc"
)

const transportName = "leangrpc"

// dial creates a plaintext leangrpc client connection to target.
func dial(target string) (clientConn, error) {
	cc, err := leangrpc.NewClient(target, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return cc, nil
}
