package grpcwire

import (
	"encoding/base64"
	"strings"

	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/metadata"
)

// BaseContentType is the content-type of gRPC without a subtype.
const BaseContentType = "application/grpc"

// ContentSubtype returns the subtype of a gRPC content-type
// ("application/grpc+proto" → "proto", "application/grpc;json" → "json",
// "application/grpc" → "") and whether contentType is a gRPC content-type
// at all. contentType is expected in lower case, as HTTP/2 carries it.
func ContentSubtype(contentType string) (string, bool) {
	if contentType == BaseContentType {
		return "", true
	}
	if !strings.HasPrefix(contentType, BaseContentType) {
		return "", false
	}
	switch contentType[len(BaseContentType)] {
	case '+', ';':
		return contentType[len(BaseContentType)+1:], true
	}
	return "", false
}

// ContentType returns the content-type announcing subtype; the common ones
// are constant strings.
func ContentType(subtype string) string {
	switch subtype {
	case "":
		return BaseContentType
	case "proto":
		return "application/grpc+proto"
	case "json":
		return "application/grpc+json"
	}
	return BaseContentType + "+" + subtype
}

// IsReservedHeader reports whether a header name belongs to the protocol
// and is kept out of user metadata (pseudo-headers, content-type,
// user-agent, te and the grpc-* fields gRPC itself sets). Users cannot send
// them as metadata either.
func IsReservedHeader(name string) bool {
	if name != "" && name[0] == ':' {
		return true
	}
	switch name {
	case "content-type", "user-agent", "te", "grpc-message-type",
		"grpc-encoding", "grpc-message", "grpc-status", "grpc-timeout":
		return true
	}
	return false
}

// isPassedHeader reports the reserved headers that grpc-go nevertheless
// shows handlers in the incoming metadata.
func isPassedHeader(name string) bool {
	return name == ":authority" || name == "user-agent"
}

const binSuffix = "-bin"

// IsBinaryKey reports whether a metadata key carries binary values.
func IsBinaryKey(k string) bool { return strings.HasSuffix(k, binSuffix) }

// EncodeBinary encodes a binary metadata value as unpadded standard base64,
// which PROTOCOL-HTTP2 says implementations should send.
func EncodeBinary(v string) string {
	return base64.RawStdEncoding.EncodeToString([]byte(v))
}

// DecodeBinary decodes a binary metadata value sent padded or unpadded.
func DecodeBinary(v string) (string, error) {
	var b []byte
	var err error
	if len(v)%4 == 0 {
		b, err = base64.StdEncoding.DecodeString(v)
	} else {
		b, err = base64.RawStdEncoding.DecodeString(v)
	}
	return string(b), err
}

// AppendMetadata appends md as header fields, binary values base64-encoded,
// leaving out reserved names (which users may not set). Keys are expected in
// lower case, as metadata.MD keeps them.
func AppendMetadata(dst []hpack.HeaderField, md metadata.MD) []hpack.HeaderField {
	for k, vv := range md {
		if IsReservedHeader(k) {
			continue
		}
		bin := IsBinaryKey(k)
		for _, v := range vv {
			if bin {
				v = EncodeBinary(v)
			}
			dst = append(dst, hpack.HeaderField{Name: k, Value: v})
		}
	}
	return dst
}

// mdBuilder fills a metadata.MD from received fields with two allocations
// (the map and one array shared by the values), instead of one slice per
// key. Each key's slice has its capacity capped, so a user's append copies
// instead of writing into a neighbour's value. The map is made on the first
// add, sized by hint.
type mdBuilder struct {
	md   metadata.MD
	vals []string
	hint int
}

// newMDBuilder returns a builder with its map made; vals is made on the
// first add unless the caller supplies it.
func newMDBuilder(n int) mdBuilder {
	return mdBuilder{md: make(metadata.MD, n), hint: n}
}

func (b *mdBuilder) add(k, v string) {
	if b.md == nil {
		b.hint = max(b.hint, 4)
		b.md = make(metadata.MD, b.hint)
	}
	if old, ok := b.md[k]; ok {
		b.md[k] = append(old, v)
		return
	}
	if len(b.vals) == cap(b.vals) {
		b.vals = make([]string, 0, b.hint)
	}
	b.vals = append(b.vals, v)
	n := len(b.vals)
	b.md[k] = b.vals[n-1 : n : n]
}

// addDecoded adds one received field, decoding binary values.
func (b *mdBuilder) addDecoded(name, value string) error {
	value, err := receivedValue(name, value)
	if err != nil {
		return err
	}
	b.add(name, value)
	return nil
}

// receivedValue is a received field's value as metadata holds it: decoded
// from base64 for a -bin key.
func receivedValue(name, value string) (string, error) {
	if IsBinaryKey(name) {
		return DecodeBinary(value)
	}
	return value, nil
}
