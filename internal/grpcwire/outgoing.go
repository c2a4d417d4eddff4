package grpcwire

import (
	"context"
	_ "unsafe" // go:linkname

	"google.golang.org/grpc/metadata"
)

// outgoingRaw returns the outgoing metadata of ctx as it was attached: the
// MD given to metadata.NewOutgoingContext, keys as the caller wrote them,
// and the pairs of each AppendToOutgoingContext; ok is false when there is
// none. metadata.FromOutgoingContext lowercases every key, which would
// send a key that grpc-go's client refuses; grpc-go reads these through
// an internal hook, which another module cannot import, so the function
// behind it is linked here by name. TestOutgoingRaw checks it against
// FromOutgoingContext, so that a grpc-go release that changes it fails the
// tests rather than the calls. (The empty outgoing.s lets this declaration
// go without a body.)
//
//go:linkname outgoingRaw google.golang.org/grpc/metadata.fromOutgoingContextRaw
func outgoingRaw(ctx context.Context) (md metadata.MD, added [][]string, ok bool)
