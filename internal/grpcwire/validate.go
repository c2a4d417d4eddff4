package grpcwire

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Metadata is checked before it can reach the wire, with grpc-go's rules
// and messages (its errors are what callers match on): a key is non-empty
// and made of [0-9a-z-_.] (pseudo-headers excepted); a value under a key
// without the -bin suffix is printable ASCII (0x20-0x7E). An uppercase key
// is refused, not lowercased: the MD helpers (Pairs, New, Set, Append,
// AppendToOutgoingContext) lowercase keys themselves, so only a map built
// by hand carries one, and grpc-go refuses that.

// checkKey returns why key cannot be a metadata key, or nil.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("there is an empty key in the header")
	}
	if key[0] == ':' {
		return nil
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return fmt.Errorf("header key %q contains illegal characters not in [0-9a-z-_.]", key)
		}
	}
	return nil
}

// checkPair returns why key and its values cannot be sent, or nil.
func checkPair(key string, values ...string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if IsBinaryKey(key) {
		return nil // base64-encoded on the wire, whatever the bytes
	}
	for _, v := range values {
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return fmt.Errorf("header key %q contains value with non-printable ASCII characters", key)
			}
		}
	}
	return nil
}

// ValidateMD returns an Internal status error for the first pair of md
// that cannot be sent, or nil.
func ValidateMD(md metadata.MD) error {
	for k, vv := range md {
		if err := checkPair(k, vv...); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	return nil
}

// ValidPairs returns md without the pairs that cannot be sent (md itself
// when all can), and the error of the first one left out.
func ValidPairs(md metadata.MD) (metadata.MD, error) {
	err := ValidateMD(md)
	if err == nil {
		return md, nil
	}
	valid := make(metadata.MD, len(md))
	for k, vv := range md {
		if checkPair(k, vv...) == nil {
			valid[k] = vv
		}
	}
	return valid, err
}

// OutgoingMD returns the outgoing metadata of a client's ctx with keys in
// lower case (metadata.FromOutgoingContext), or an Internal status error,
// before anything is sent, when a pair cannot be sent. It looks at the
// pairs as they were attached (outgoingRaw), where a key set in upper case
// in a hand-built map is still seen as such.
func OutgoingMD(ctx context.Context) (metadata.MD, error) {
	md, added, ok := outgoingRaw(ctx)
	if !ok {
		return nil, nil
	}
	if err := ValidateMD(md); err != nil {
		return nil, err
	}
	for _, kv := range added {
		for i := 0; i+1 < len(kv); i += 2 {
			if err := checkPair(kv[i], kv[i+1]); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
	}
	out, _ := metadata.FromOutgoingContext(ctx)
	return out, nil
}
