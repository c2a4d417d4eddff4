package grpcwire

import (
	"context"
	_ "unsafe" // go:linkname

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// CheckOutgoingMD returns an Internal status error, with grpc-go's
// message, when the outgoing metadata of a client's ctx holds a pair that
// cannot be sent (ValidatePair), or nil. It looks at the pairs as they
// were attached (outgoingRaw): the metadata helpers (Pairs, New, Set,
// Append, AppendToOutgoingContext) lowercase keys themselves, so an
// uppercase key comes only from an MD map built by hand, which grpc-go's
// client refuses, while metadata.FromOutgoingContext would lowercase it
// and let it through.
func CheckOutgoingMD(ctx context.Context) error {
	md, added, ok := outgoingRaw(ctx)
	if !ok {
		return nil
	}
	if err := ValidateMD(md); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	for _, kv := range added {
		for i := 0; i+1 < len(kv); i += 2 {
			if err := ValidatePair(kv[i], kv[i+1]); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
		}
	}
	return nil
}

// outgoingRaw returns the outgoing metadata of ctx as it was attached: the
// MD given to metadata.NewOutgoingContext, keys as the caller wrote them,
// and the pairs of each AppendToOutgoingContext; ok is false when there is
// none. grpc-go's client reads them through an internal hook, which
// another module cannot import, so the function behind it is linked here
// by name. TestOutgoingRaw checks it against what was attached, so that a
// grpc-go release that changes it fails the tests rather than the calls.
// (The empty outgoing.s lets this declaration go without a body.)
//
//go:linkname outgoingRaw google.golang.org/grpc/metadata.fromOutgoingContextRaw
func outgoingRaw(ctx context.Context) (md metadata.MD, added [][]string, ok bool)
