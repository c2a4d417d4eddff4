// Package h2frame is the HTTP/2 frame layer of RFC 9113: frame types, the
// reading of frame headers and payloads into pooled buffers, the encoding of
// frames into a pooled write buffer with vectored writes for large DATA
// payloads, CONTINUATION reassembly, HPACK under the header-list limit, and
// every framing rule of RFC 9113 §4–6. It knows nothing of streams beyond
// their identifiers: state lives in the connection engine above.
//
// Buffer ownership, reading: the Reader owns its read buffer (with a
// BufferSource and pooling on, given by NextBuffer when bytes arrive and
// freed as soon as every byte in it is parsed). A DATA payload gets a pooled buffer
// of its own, which ReadFrame returns as an owned buffer in DataFrame.Data:
// the caller frees it. Everything else in a returned frame is valid until the
// next ReadFrame, except the decoded header strings, which may be kept.
//
// Buffer ownership, writing: the Writer owns its write buffers (an inline
// one, then pooled ones) from the first Write after a Flush until that Flush
// returns them. WriteDataBuffer borrows the caller's buffer until return and
// takes its own reference for large payloads, dropped by the Flush that
// writes them (or by Close).
package h2frame

import (
	"fmt"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// Type is a frame type (RFC 9113 §6).
type Type uint8

const (
	TypeData         Type = 0x0
	TypeHeaders      Type = 0x1
	TypePriority     Type = 0x2
	TypeRSTStream    Type = 0x3
	TypeSettings     Type = 0x4
	TypePushPromise  Type = 0x5
	TypePing         Type = 0x6
	TypeGoAway       Type = 0x7
	TypeWindowUpdate Type = 0x8
	TypeContinuation Type = 0x9
)

// Flags are a frame's flag bits; their meaning depends on the type.
type Flags uint8

const (
	FlagEndStream  Flags = 0x1  // DATA, HEADERS
	FlagAck        Flags = 0x1  // SETTINGS, PING
	FlagEndHeaders Flags = 0x4  // HEADERS, PUSH_PROMISE, CONTINUATION
	FlagPadded     Flags = 0x8  // DATA, HEADERS, PUSH_PROMISE
	FlagPriority   Flags = 0x20 // HEADERS
)

// Has reports whether all bits of g are set.
func (f Flags) Has(g Flags) bool { return f&g == g }

// HeaderLen is the size of a frame header.
const HeaderLen = 9

// Protocol limits from RFC 9113.
const (
	MinMaxFrameSize       = 1 << 14   // SETTINGS_MAX_FRAME_SIZE floor and default
	MaxMaxFrameSize       = 1<<24 - 1 // SETTINGS_MAX_FRAME_SIZE ceiling
	MaxWindowSize         = 1<<31 - 1
	DefaultInitialWindow  = 65535
	DefaultHeaderTableLen = 4096
)

// FrameHeader is the 9-byte header of every frame.
type FrameHeader struct {
	Length   uint32 // payload length, 24 bits
	Type     Type
	Flags    Flags
	StreamID uint32 // 31 bits; the reserved bit is cleared on read
}

func (h FrameHeader) String() string {
	return fmt.Sprintf("%v len=%d flags=%#x stream=%d", h.Type, h.Length, uint8(h.Flags), h.StreamID)
}

func (t Type) String() string {
	switch t {
	case TypeData:
		return "DATA"
	case TypeHeaders:
		return "HEADERS"
	case TypePriority:
		return "PRIORITY"
	case TypeRSTStream:
		return "RST_STREAM"
	case TypeSettings:
		return "SETTINGS"
	case TypePushPromise:
		return "PUSH_PROMISE"
	case TypePing:
		return "PING"
	case TypeGoAway:
		return "GOAWAY"
	case TypeWindowUpdate:
		return "WINDOW_UPDATE"
	case TypeContinuation:
		return "CONTINUATION"
	}
	return fmt.Sprintf("UNKNOWN_%#x", uint8(t))
}

// Frame is one of the *XxxFrame types below. Values returned by
// Reader.ReadFrame are reused: a frame is valid until the next ReadFrame,
// except for what its doc says the caller owns.
type Frame interface {
	Header() FrameHeader
}

// DataFrame is a DATA frame (RFC 9113 §6.1).
type DataFrame struct {
	FrameHeader
	// Data holds the payload without padding. It is an owned buffer: the
	// caller of ReadFrame must Free it (or pass it on). Nil when the
	// payload, padding aside, is empty.
	Data *bufpool.Buffer
	// FlowLen is the whole payload length including padding, which is
	// what flow control counts (RFC 9113 §6.9.1).
	FlowLen uint32
	// Landed is how many bytes of data, the first ones, were written into
	// the destination a DataSink gave; Data holds the rest.
	Landed uint32
	// Sink is the buffer those bytes landed in, nil when none did: one
	// owned reference the caller of ReadFrame must Free (or pass on).
	Sink *bufpool.Buffer
}

// EndStream reports the END_STREAM flag.
func (f *DataFrame) EndStream() bool { return f.Flags.Has(FlagEndStream) }

// Priority is the deprecated priority signal of HEADERS and PRIORITY.
type Priority struct {
	StreamDep uint32
	Exclusive bool
	Weight    uint8
}

// HeadersFrame is a HEADERS frame with its CONTINUATION frames already
// merged and its header block decoded (RFC 9113 §6.2, §6.10).
type HeadersFrame struct {
	FrameHeader // Flags include FlagEndHeaders once merged
	HasPriority bool
	Priority    Priority
	// Fields is the decoded header list, valid until the next ReadFrame. The
	// strings inside are stable and may be kept.
	Fields []hpack.HeaderField
	// Truncated is set when the list exceeded the header list limit: Fields
	// holds only those within it. The engine answers with 431 or RST_STREAM.
	Truncated bool
	// Invalid, when non-empty, names the first generic field rule of RFC
	// 9113 §8.2 the list breaks (uppercase name, connection-specific field,
	// pseudo-header after a regular one, unknown or repeated pseudo-header,
	// TE other than "trailers"). The engine resets the stream with
	// PROTOCOL_ERROR. Role-specific pseudo-header checks are the engine's.
	Invalid string
}

// EndStream reports the END_STREAM flag.
func (f *HeadersFrame) EndStream() bool { return f.Flags.Has(FlagEndStream) }

// PriorityFrame is a PRIORITY frame (RFC 9113 §6.3).
type PriorityFrame struct {
	FrameHeader
	Priority
}

// RSTStreamFrame is a RST_STREAM frame (RFC 9113 §6.4).
type RSTStreamFrame struct {
	FrameHeader
	Code ErrCode
}

// Setting is one SETTINGS parameter.
type Setting struct {
	ID  SettingID
	Val uint32
}

// SettingID is a SETTINGS parameter identifier (RFC 9113 §6.5.2).
type SettingID uint16

const (
	SettingHeaderTableSize      SettingID = 0x1
	SettingEnablePush           SettingID = 0x2
	SettingMaxConcurrentStreams SettingID = 0x3
	SettingInitialWindowSize    SettingID = 0x4
	SettingMaxFrameSize         SettingID = 0x5
	SettingMaxHeaderListSize    SettingID = 0x6
)

// MaxSettingsPerFrame bounds how many parameters one SETTINGS frame may carry
// before it is refused as hostile. Six are defined; repeats are legal.
const MaxSettingsPerFrame = 64

// SettingsFrame is a SETTINGS frame (RFC 9113 §6.5). Values were validated
// (ENABLE_PUSH 0/1, INITIAL_WINDOW_SIZE ≤ 2^31-1, MAX_FRAME_SIZE in range);
// unknown identifiers are kept, for the engine to ignore.
type SettingsFrame struct {
	FrameHeader
	// Settings is valid until the next ReadFrame.
	Settings []Setting
}

// IsAck reports the ACK flag.
func (f *SettingsFrame) IsAck() bool { return f.Flags.Has(FlagAck) }

// PushPromiseFrame is a PUSH_PROMISE frame (RFC 9113 §6.6). leangrpc never
// enables push; the frame is parsed so that the engine can refuse it.
type PushPromiseFrame struct {
	FrameHeader
	PromisedID uint32
}

// PingFrame is a PING frame (RFC 9113 §6.7).
type PingFrame struct {
	FrameHeader
	Data [8]byte
}

// IsAck reports the ACK flag.
func (f *PingFrame) IsAck() bool { return f.Flags.Has(FlagAck) }

// GoAwayFrame is a GOAWAY frame (RFC 9113 §6.8).
type GoAwayFrame struct {
	FrameHeader
	LastStreamID uint32
	Code         ErrCode
	// Debug is valid until the next ReadFrame.
	Debug []byte
}

// WindowUpdateFrame is a WINDOW_UPDATE frame (RFC 9113 §6.9). A zero
// increment is reported as an error by ReadFrame, not returned.
type WindowUpdateFrame struct {
	FrameHeader
	Increment uint32
}

func (f *DataFrame) Header() FrameHeader         { return f.FrameHeader }
func (f *HeadersFrame) Header() FrameHeader      { return f.FrameHeader }
func (f *PriorityFrame) Header() FrameHeader     { return f.FrameHeader }
func (f *RSTStreamFrame) Header() FrameHeader    { return f.FrameHeader }
func (f *SettingsFrame) Header() FrameHeader     { return f.FrameHeader }
func (f *PushPromiseFrame) Header() FrameHeader  { return f.FrameHeader }
func (f *PingFrame) Header() FrameHeader         { return f.FrameHeader }
func (f *GoAwayFrame) Header() FrameHeader       { return f.FrameHeader }
func (f *WindowUpdateFrame) Header() FrameHeader { return f.FrameHeader }
