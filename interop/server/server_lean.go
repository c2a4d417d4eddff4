//go:build !grpcgo_transport

package main

import "github.com/leangrpc/leangrpc"

const transportName = "leangrpc"

func newServer() server { return leangrpc.NewServer() }
