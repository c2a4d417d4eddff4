package main

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // registers gzip for -compression gzip
)

// checkCompression reports whether -compression names a registered
// compressor (or none).
func checkCompression(name string) error {
	if name == "" || name == encoding.Identity || encoding.GetCompressor(name) != nil {
		return nil
	}
	return fmt.Errorf("-compression: no compressor %q is registered (gzip is)", name)
}

// compressionOptions returns the call options that make a client's calls
// use the compressor name; nil for none.
func compressionOptions(name string) []grpc.CallOption {
	if name == "" {
		return nil
	}
	return []grpc.CallOption{grpc.UseCompressor(name)}
}
