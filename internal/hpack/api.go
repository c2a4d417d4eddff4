// Package hpack implements HPACK, the header compression of RFC 7541, for
// leangrpc's HTTP/2 frame layer. It uses the standard library only.
//
// Files: static.go (Appendix A and its lookup), table.go (the dynamic table
// as a ring buffer), huffman.go (Appendix B: code lengths, a 4-bit-step
// decoding automaton), intern.go (the gRPC vocabulary), decode.go, encode.go,
// limits.go (the bound on decoding work).
//
// Allocation model. Decoding a field found in a table allocates nothing: the
// emitted strings are the static table's or the dynamic table's own. A
// literal equal to a vocabulary word (content-type, application/grpc,
// grpc-status values...) is interned; any other literal costs one
// allocation for its name and value together. Encoding allocates nothing in
// steady state. Constant blocks can be encoded once with EncodeStaticBlock.
package hpack

import "errors"

// HeaderField is one decoded or to-be-encoded header field.
type HeaderField struct {
	Name, Value string
	// Sensitive fields are encoded as "never indexed" (RFC 7541 §6.2.3)
	// and decoded with this flag set when the peer marked them so.
	Sensitive bool
}

// Size is the field's size as RFC 7541 §4.1 counts it for the dynamic table
// and as RFC 9113 §6.5.2 counts it for SETTINGS_MAX_HEADER_LIST_SIZE.
func (f HeaderField) Size() uint32 { return uint32(len(f.Name) + len(f.Value) + 32) }

// ErrListTooLarge is returned by Decoder.Decode when the decoded header list
// exceeds the limit it was given, or the bound limits.go sets on its size
// relative to the block's (an "HPACK bomb"). The block was still decoded to the end, so
// the dynamic table is in sync and the connection can go on; the fields past
// the limit were not emitted.
var ErrListTooLarge = errors.New("hpack: header list larger than the limit")

// DecodingError is a malformed header block: RFC 9113 §4.3 makes it a
// connection error of type COMPRESSION_ERROR.
type DecodingError struct{ Reason string }

func (e *DecodingError) Error() string { return "hpack: " + e.Reason }
