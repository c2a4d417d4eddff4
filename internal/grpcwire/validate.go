package grpcwire

import (
	"fmt"

	"google.golang.org/grpc/metadata"
)

// ValidatePair checks a metadata field about to be sent as grpc-go does,
// with its messages: a key of one or more characters from [0-9a-z_.-]
// (pseudo-headers pass), and unless the key ends in "-bin" values of
// printable ASCII (0x20-0x7E). A field that fails would otherwise go out
// as a malformed HTTP/2 header, which the peer answers by resetting the
// stream with PROTOCOL_ERROR.
func ValidatePair(key string, values ...string) error {
	if key == "" {
		return fmt.Errorf("there is an empty key in the header")
	}
	if key[0] == ':' {
		return nil
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '.' && c != '-' && c != '_' {
			return fmt.Errorf("header key %q contains illegal characters not in [0-9a-z-_.]", key)
		}
	}
	if IsBinaryKey(key) {
		return nil
	}
	for _, v := range values {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7E {
				return fmt.Errorf("header key %q contains value with non-printable ASCII characters", key)
			}
		}
	}
	return nil
}

// ValidateMD is ValidatePair for every field of md.
func ValidateMD(md metadata.MD) error {
	for k, vs := range md {
		if err := ValidatePair(k, vs...); err != nil {
			return err
		}
	}
	return nil
}
