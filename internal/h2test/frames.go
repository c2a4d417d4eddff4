package h2test

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// ClientPreface is the client connection preface of RFC 9113 §3.4.
const ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Frame is a frame as it crossed the wire: its header and its whole payload,
// padding included. The accessors decode the payload of one frame type each;
// called on a frame of another type they return zero values.
type Frame struct {
	h2frame.FrameHeader
	Payload []byte // owned by the Frame; the peer never reuses it
}

func (f *Frame) String() string {
	s := f.FrameHeader.String()
	switch f.Type {
	case h2frame.TypeRSTStream:
		s += " code=" + f.ErrCode().String()
	case h2frame.TypeGoAway:
		s += fmt.Sprintf(" last=%d code=%v debug=%q", f.LastStreamID(), f.ErrCode(), f.DebugData())
	case h2frame.TypeWindowUpdate:
		s += fmt.Sprintf(" incr=%d", f.Increment())
	case h2frame.TypeSettings:
		s += fmt.Sprintf(" %v", f.Settings())
	case h2frame.TypePing:
		s += fmt.Sprintf(" data=%x", f.PingData())
	}
	return s
}

// AppendFrame appends the encoding of one frame to dst. The payload's length
// goes into the header as is, so oversize frames can be built on purpose.
func AppendFrame(dst []byte, t h2frame.Type, flags h2frame.Flags, streamID uint32, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, byte(n>>16), byte(n>>8), byte(n), byte(t), byte(flags))
	dst = binary.BigEndian.AppendUint32(dst, streamID)
	return append(dst, payload...)
}

// ParseFrame splits the first frame off b. It reports ok false when b does not
// hold a whole frame yet. The reserved bit of the stream identifier is
// cleared; the payload is copied.
func ParseFrame(b []byte) (f *Frame, rest []byte, ok bool) {
	if len(b) < h2frame.HeaderLen {
		return nil, b, false
	}
	n := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
	if len(b) < h2frame.HeaderLen+n {
		return nil, b, false
	}
	f = &Frame{
		FrameHeader: h2frame.FrameHeader{
			Length:   uint32(n),
			Type:     h2frame.Type(b[3]),
			Flags:    h2frame.Flags(b[4]),
			StreamID: binary.BigEndian.Uint32(b[5:9]) & (1<<31 - 1),
		},
		Payload: append([]byte(nil), b[h2frame.HeaderLen:h2frame.HeaderLen+n]...),
	}
	return f, b[h2frame.HeaderLen+n:], true
}

// unpadded returns the payload of a DATA, HEADERS or PUSH_PROMISE frame
// without the pad length byte and the padding; nil when malformed.
func (f *Frame) unpadded() []byte {
	p := f.Payload
	if f.Flags.Has(h2frame.FlagPadded) {
		if len(p) < 1 || int(p[0]) > len(p)-1 {
			return nil
		}
		p = p[1 : len(p)-int(p[0])]
	}
	return p
}

// Data returns a DATA frame's data without padding.
func (f *Frame) Data() []byte {
	if f.Type != h2frame.TypeData {
		return nil
	}
	return f.unpadded()
}

// EndStream reports END_STREAM on DATA and HEADERS.
func (f *Frame) EndStream() bool {
	return (f.Type == h2frame.TypeData || f.Type == h2frame.TypeHeaders) && f.Flags.Has(h2frame.FlagEndStream)
}

// IsAck reports ACK on SETTINGS and PING.
func (f *Frame) IsAck() bool {
	return (f.Type == h2frame.TypeSettings || f.Type == h2frame.TypePing) && f.Flags.Has(h2frame.FlagAck)
}

// BlockFragment returns the header block fragment of a HEADERS or
// CONTINUATION frame, without padding and priority fields.
func (f *Frame) BlockFragment() []byte {
	switch f.Type {
	case h2frame.TypeContinuation:
		return f.Payload
	case h2frame.TypeHeaders:
		p := f.unpadded()
		if f.Flags.Has(h2frame.FlagPriority) {
			if len(p) < 5 {
				return nil
			}
			p = p[5:]
		}
		return p
	}
	return nil
}

// ErrCode returns the error code of RST_STREAM and GOAWAY.
func (f *Frame) ErrCode() h2frame.ErrCode {
	switch {
	case f.Type == h2frame.TypeRSTStream && len(f.Payload) >= 4:
		return h2frame.ErrCode(binary.BigEndian.Uint32(f.Payload))
	case f.Type == h2frame.TypeGoAway && len(f.Payload) >= 8:
		return h2frame.ErrCode(binary.BigEndian.Uint32(f.Payload[4:]))
	}
	return 0
}

// LastStreamID returns GOAWAY's last stream identifier.
func (f *Frame) LastStreamID() uint32 {
	if f.Type != h2frame.TypeGoAway || len(f.Payload) < 8 {
		return 0
	}
	return binary.BigEndian.Uint32(f.Payload) & (1<<31 - 1)
}

// DebugData returns GOAWAY's debug data.
func (f *Frame) DebugData() []byte {
	if f.Type != h2frame.TypeGoAway || len(f.Payload) < 8 {
		return nil
	}
	return f.Payload[8:]
}

// Increment returns WINDOW_UPDATE's increment.
func (f *Frame) Increment() uint32 {
	if f.Type != h2frame.TypeWindowUpdate || len(f.Payload) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(f.Payload) & (1<<31 - 1)
}

// PingData returns PING's opaque data.
func (f *Frame) PingData() (d [8]byte) {
	if f.Type == h2frame.TypePing {
		copy(d[:], f.Payload)
	}
	return d
}

// Settings returns SETTINGS' parameters in wire order.
func (f *Frame) Settings() []h2frame.Setting {
	if f.Type != h2frame.TypeSettings {
		return nil
	}
	var s []h2frame.Setting
	for p := f.Payload; len(p) >= 6; p = p[6:] {
		s = append(s, h2frame.Setting{ID: h2frame.SettingID(binary.BigEndian.Uint16(p)), Val: binary.BigEndian.Uint32(p[2:])})
	}
	return s
}

// SettingsPayload encodes SETTINGS parameters.
func SettingsPayload(settings ...h2frame.Setting) []byte {
	b := make([]byte, 0, 6*len(settings))
	for _, s := range settings {
		b = binary.BigEndian.AppendUint16(b, uint16(s.ID))
		b = binary.BigEndian.AppendUint32(b, s.Val)
	}
	return b
}

// EncodeHeaders encodes fields as an HPACK block of literals without
// indexing and without Huffman coding (RFC 7541 §6.2.2), so the block
// leaves the receiver's dynamic table untouched and reads the same on any
// connection. Sensitive fields use the never-indexed form.
func EncodeHeaders(fields ...hpack.HeaderField) []byte {
	var b []byte
	for _, f := range fields {
		if f.Sensitive {
			b = append(b, 0x10)
		} else {
			b = append(b, 0x00)
		}
		b = appendHPACKString(b, f.Name)
		b = appendHPACKString(b, f.Value)
	}
	return b
}

// Fields turns alternating names and values into header fields.
func Fields(kv ...string) []hpack.HeaderField {
	if len(kv)%2 != 0 {
		panic("h2test: odd number of header name/value strings")
	}
	fs := make([]hpack.HeaderField, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		fs = append(fs, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return fs
}

func appendHPACKString(b []byte, s string) []byte {
	b = AppendHPACKInt(b, 7, 0, uint64(len(s)))
	return append(b, s...)
}

// AppendHPACKInt appends an HPACK integer (RFC 7541 §5.1) with an n-bit
// prefix; first holds the bits above the prefix in the first byte.
func AppendHPACKInt(b []byte, n uint, first byte, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(max))
	v -= max
	for v >= 128 {
		b = append(b, byte(v%128)|0x80)
		v /= 128
	}
	return append(b, byte(v))
}

// HeaderDecoder decodes the header blocks the peer receives, one connection
// direction, keeping the dynamic table across calls.
type HeaderDecoder interface {
	DecodeBlock(block []byte) ([]hpack.HeaderField, error)
}

// leanDecoder adapts internal/hpack's Decoder.
type leanDecoder struct{ d *hpack.Decoder }

func (d leanDecoder) DecodeBlock(block []byte) ([]hpack.HeaderField, error) {
	var fs []hpack.HeaderField
	err := d.d.Decode(block, 0, func(f hpack.HeaderField) { fs = append(fs, f) })
	return fs, err
}

// NewLeanDecoder returns a HeaderDecoder built on internal/hpack.
func NewLeanDecoder() HeaderDecoder {
	return leanDecoder{hpack.NewDecoder(h2frame.DefaultHeaderTableLen)}
}

// Header returns the value of the first field named name, and whether there
// was one.
func Header(fields []hpack.HeaderField, name string) (string, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// FormatFields renders fields one per line, for failure messages.
func FormatFields(fields []hpack.HeaderField) string {
	var sb strings.Builder
	for _, f := range fields {
		fmt.Fprintf(&sb, "  %s: %s\n", f.Name, f.Value)
	}
	return sb.String()
}
