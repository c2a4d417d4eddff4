package h2frame

import "fmt"

// ErrCode is an HTTP/2 error code (RFC 9113 §7).
type ErrCode uint32

const (
	ErrCodeNo                 ErrCode = 0x0
	ErrCodeProtocol           ErrCode = 0x1
	ErrCodeInternal           ErrCode = 0x2
	ErrCodeFlowControl        ErrCode = 0x3
	ErrCodeSettingsTimeout    ErrCode = 0x4
	ErrCodeStreamClosed       ErrCode = 0x5
	ErrCodeFrameSize          ErrCode = 0x6
	ErrCodeRefusedStream      ErrCode = 0x7
	ErrCodeCancel             ErrCode = 0x8
	ErrCodeCompression        ErrCode = 0x9
	ErrCodeConnect            ErrCode = 0xa
	ErrCodeEnhanceYourCalm    ErrCode = 0xb
	ErrCodeInadequateSecurity ErrCode = 0xc
	ErrCodeHTTP11Required     ErrCode = 0xd
)

var errCodeNames = [...]string{
	"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
	"SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM",
	"CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM",
	"INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
}

func (c ErrCode) String() string {
	if int(c) < len(errCodeNames) {
		return errCodeNames[c]
	}
	return fmt.Sprintf("UNKNOWN_ERROR_%#x", uint32(c))
}

// ConnError is a connection error (RFC 9113 §5.4.1): the engine sends GOAWAY
// with Code and closes the connection.
type ConnError struct {
	Code   ErrCode
	Reason string // a fixed token naming the rule broken, for logs and metrics
}

func (e ConnError) Error() string {
	return "http2: connection error: " + e.Code.String() + ": " + e.Reason
}

// StreamError is a stream error (RFC 9113 §5.4.2): the engine sends
// RST_STREAM with Code on StreamID and the connection goes on.
type StreamError struct {
	StreamID uint32
	Code     ErrCode
	Reason   string
}

func (e StreamError) Error() string {
	return fmt.Sprintf("http2: stream %d error: %v: %s", e.StreamID, e.Code, e.Reason)
}
