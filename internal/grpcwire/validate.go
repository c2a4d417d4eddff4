package grpcwire

import "fmt"

// ValidatePair checks a metadata field a client is about to send as
// grpc-go does, with its messages: a key of one or more characters from
// [0-9a-z_.-] (pseudo-headers pass), and unless the key ends in "-bin" a
// value of printable ASCII (0x20-0x7E).
func ValidatePair(key, value string) error {
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
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < 0x20 || c > 0x7E {
			return fmt.Errorf("header key %q contains value with non-printable ASCII characters", key)
		}
	}
	return nil
}
