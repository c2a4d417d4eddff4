//go:build !grpcgo_transport

package main

import (
	"google.golang.org/grpc/credentials"

	"github.com/leangrpc/leangrpc"
)

const transportName = "leangrpc"

// dial creates a leangrpc client connection to target.
func dial(target string, creds credentials.TransportCredentials) (clientConn, error) {
	cc, err := leangrpc.NewClient(target, leangrpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	return cc, nil
}
