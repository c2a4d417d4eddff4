// Package deps pins the modules that tests, leanbench and the interop
// binaries use, so that go.mod lists them before any of those exist.
package deps

import (
	_ "golang.org/x/net/http2"
	_ "golang.org/x/net/http2/hpack"
	_ "golang.org/x/sys/unix"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/benchmark"
	_ "google.golang.org/grpc/benchmark/stats"
	_ "google.golang.org/grpc/health"
	_ "google.golang.org/grpc/interop"
	_ "google.golang.org/grpc/interop/grpc_testing"
	_ "google.golang.org/grpc/mem"
	_ "google.golang.org/grpc/reflection"
)
