package grpcgo
