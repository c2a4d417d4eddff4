//go:build !grpcgo_transport

package main

import "github.com/leangrpc/leangrpc"

const transportName = "leangrpc"

// dial creates a plaintext leangrpc client connection to target.
func dial(target string) (clientConn, error) {
	cc, err := leangrpc.NewClient(target)
	if err != nil {
		return nil, err
	}
	return cc, nil
}
