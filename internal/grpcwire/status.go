package grpcwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const hexDigits = "0123456789ABCDEF"

var statusOK = status.New(codes.OK, "")

// EncodeGRPCMessage percent-encodes a grpc-message value as PROTOCOL-HTTP2 asks:
// printable ASCII except '%' passes, every other byte (including each byte
// of a multi-byte UTF-8 sequence) becomes %XX. Invalid UTF-8 is encoded as
// the bytes of U+FFFD, as grpc-go does.
func EncodeGRPCMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < ' ' || c > '~' || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	b := make([]byte, 0, len(msg)+16)
	for len(msg) > 0 {
		r, size := utf8.DecodeRuneInString(msg)
		if size == 1 && r != utf8.RuneError {
			c := msg[0]
			if c >= ' ' && c <= '~' && c != '%' {
				b = append(b, c)
			} else {
				b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			}
		} else {
			var enc [utf8.UTFMax]byte
			n := utf8.EncodeRune(enc[:], r)
			for _, c := range enc[:n] {
				b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			}
		}
		msg = msg[size:]
	}
	return string(b)
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// DecodeGRPCMessage reverses EncodeGRPCMessage. A '%' not followed by two hex digits
// is kept as it is, as PROTOCOL-HTTP2 asks of receivers.
func DecodeGRPCMessage(msg string) string {
	i := 0
	for i < len(msg) && msg[i] != '%' {
		i++
	}
	if i == len(msg) {
		return msg
	}
	b := make([]byte, 0, len(msg))
	b = append(b, msg[:i]...)
	for ; i < len(msg); i++ {
		c := msg[i]
		if c == '%' && i+2 < len(msg) {
			hi, ok1 := unhex(msg[i+1])
			lo, ok2 := unhex(msg[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
				i += 2
				continue
			}
		}
		b = append(b, c)
	}
	return string(b)
}

// AppendStatus appends the grpc-status, grpc-message (when non-empty) and
// grpc-status-details-bin (when the status has details) fields of st.
func AppendStatus(dst []hpack.HeaderField, st *status.Status) []hpack.HeaderField {
	dst = append(dst, hpack.HeaderField{Name: "grpc-status", Value: codeString(st.Code())})
	if m := st.Message(); m != "" {
		dst = append(dst, hpack.HeaderField{Name: "grpc-message", Value: EncodeGRPCMessage(m)})
	}
	if st.Code() == codes.OK {
		return dst
	}
	if p := st.Proto(); len(p.GetDetails()) > 0 {
		if b, err := proto.Marshal(p); err == nil {
			dst = append(dst, hpack.HeaderField{Name: "grpc-status-details-bin", Value: EncodeBinary(string(b))})
		}
	}
	return dst
}

var codeStrings = [...]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16"}

func codeString(c codes.Code) string {
	if int(c) < len(codeStrings) {
		return codeStrings[c]
	}
	return strconv.FormatUint(uint64(c), 10)
}

// statusFromTrailer builds the status a client reports from the grpc-status
// code, the decoded grpc-message and the decoded grpc-status-details-bin
// values. Details whose code disagrees with grpc-status turn the status into
// Internal, as grpc-go does; undecodable details are ignored.
func statusFromTrailer(code codes.Code, msg string, details []string) *status.Status {
	if code == codes.OK && msg == "" && len(details) == 0 {
		return statusOK // statuses are immutable: one serves every call
	}
	if len(details) != 1 {
		return status.New(code, msg)
	}
	p := &spb.Status{}
	if err := proto.Unmarshal([]byte(details[0]), p); err != nil {
		return status.New(code, msg)
	}
	if p.Code != int32(code) {
		return status.Newf(codes.Internal, "grpc-status-details-bin mismatch: grpc-status=%v, grpc-message=%q, grpc-status-details-bin=%+v", code, msg, p)
	}
	return status.FromProto(p)
}

// HTTPStatusCode maps the HTTP status of a response that is not gRPC to the
// gRPC code the client reports, following PROTOCOL-HTTP2's table.
func HTTPStatusCode(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest:
		return codes.Internal
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	}
	return codes.Unknown
}

// RSTCode maps a RST_STREAM code received from the peer to a gRPC code.
// CANCEL means DeadlineExceeded when the call's own deadline has passed.
func RSTCode(c h2frame.ErrCode, deadlinePassed bool) codes.Code {
	switch c {
	case h2frame.ErrCodeRefusedStream:
		return codes.Unavailable
	case h2frame.ErrCodeCancel:
		if deadlinePassed {
			return codes.DeadlineExceeded
		}
		return codes.Canceled
	case h2frame.ErrCodeEnhanceYourCalm, h2frame.ErrCodeFlowControl:
		return codes.ResourceExhausted
	case h2frame.ErrCodeInadequateSecurity:
		return codes.PermissionDenied
	}
	return codes.Internal
}

// RSTStatus is the status of a stream the peer reset with code c.
func RSTStatus(c h2frame.ErrCode, deadlinePassed bool) *status.Status {
	gc := RSTCode(c, deadlinePassed)
	if gc == codes.DeadlineExceeded {
		return status.New(gc, context.DeadlineExceeded.Error())
	}
	return status.Newf(gc, "stream terminated by RST_STREAM with error code: %v", c)
}

// ErrConnClosed is the cause of statuses about a connection that closed; it
// matches net.ErrClosed under errors.Is.
var ErrConnClosed error = connClosedError{}

type connClosedError struct{}

func (connClosedError) Error() string        { return "connection closed" }
func (connClosedError) Is(target error) bool { return target == net.ErrClosed }
func (connClosedError) Unwrap() error        { return net.ErrClosed }

// statusError is a status error that also unwraps to its transport cause,
// so that errors.Is(err, net.ErrClosed) holds for closed connections while
// status.FromError still finds the status.
type statusError struct {
	st    *status.Status
	cause error
}

func (e *statusError) Error() string              { return e.st.Err().Error() }
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the transport cause, held so that it no longer matches
// io.EOF when it did (the peer closed the socket): callers take io.EOF for
// the clean end of a stream, and a lost connection is not one (grpc-go's
// status errors match nothing of the transport).
func (e *statusError) Unwrap() error {
	if errors.Is(e.cause, io.EOF) {
		return notEOF{e.cause}
	}
	return e.cause
}

// notEOF is a transport error that answers errors.Is and errors.As as the
// error it holds does, except that it does not match io.EOF. It has no
// Unwrap, which would let errors.Is find io.EOF below it.
type notEOF struct{ err error }

func (e notEOF) Error() string        { return e.err.Error() }
func (e notEOF) Is(target error) bool { return target != io.EOF && errors.Is(e.err, target) }
func (e notEOF) As(target any) bool   { return errors.As(e.err, target) }

// ToStatusError converts a transport error to a status error with grpc-go's
// codes. Status errors pass through; context errors become Canceled or
// DeadlineExceeded; closed connections (net.ErrClosed, io.EOF on the
// connection) and refused streams become Unavailable; h2frame stream and
// connection errors map by their code; anything else is Unavailable for a
// connection-level failure, as grpc-go reports a broken transport.
func ToStatusError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, context.Canceled.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	case errors.Is(err, net.ErrClosed):
		return &statusError{st: status.New(codes.Unavailable, "connection closed: "+err.Error()), cause: err}
	}
	var se h2frame.StreamError
	if errors.As(err, &se) {
		return &statusError{st: status.New(RSTCode(se.Code, false), err.Error()), cause: err}
	}
	var ce h2frame.ConnError
	if errors.As(err, &ce) {
		return &statusError{st: status.New(codes.Unavailable, err.Error()), cause: err}
	}
	return &statusError{st: status.New(codes.Unavailable, fmt.Sprintf("connection error: %v", err)), cause: err}
}
