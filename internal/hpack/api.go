// Package hpack implements HPACK, the header compression of RFC 7541, for
// leangrpc's HTTP/2 frame layer. It uses the standard library only.
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
// exceeds the limit it was given. The block was still decoded to the end, so
// the dynamic table is in sync and the connection can go on; the fields past
// the limit were not emitted.
var ErrListTooLarge = errors.New("hpack: header list larger than the limit")

// DecodingError is a malformed header block: RFC 9113 §4.3 makes it a
// connection error of type COMPRESSION_ERROR.
type DecodingError struct{ Reason string }

func (e *DecodingError) Error() string { return "hpack: " + e.Reason }
