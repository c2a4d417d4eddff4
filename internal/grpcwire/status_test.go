package grpcwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestGRPCMessageEncoding(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"Hello", "Hello"},
		{"my favorite character is \u0000", "my favorite character is %00"},
		{"my favorite character is %", "my favorite character is %25"},
		{"\t\ntest \x7f~", "%09%0Atest %7F~"},
		{"日本", "%E6%97%A5%E6%9C%AC"},
		{"\xff", "%EF%BF%BD"}, // invalid UTF-8 becomes U+FFFD
	}
	for _, tc := range tests {
		if got := EncodeGRPCMessage(tc.in); got != tc.want {
			t.Errorf("EncodeGRPCMessage(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if tc.in == "\xff" {
			continue
		}
		if got := DecodeGRPCMessage(tc.want); got != tc.in {
			t.Errorf("DecodeGRPCMessage(%q) = %q, want %q", tc.want, got, tc.in)
		}
	}
	// Receivers keep malformed escapes as they are.
	for in, want := range map[string]string{
		"%":      "%",
		"%4":     "%4",
		"%zz":    "%zz",
		"a%41b":  "aAb",
		"%41%":   "A%",
		"%%41":   "%A",
		"%e6%97": "\xe6\x97",
	} {
		if got := DecodeGRPCMessage(in); got != want {
			t.Errorf("DecodeGRPCMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHTTPStatusCode(t *testing.T) {
	tests := map[int]codes.Code{
		400: codes.Internal, 401: codes.Unauthenticated, 403: codes.PermissionDenied,
		404: codes.Unimplemented, 429: codes.Unavailable, 502: codes.Unavailable,
		503: codes.Unavailable, 504: codes.Unavailable, 200: codes.Unknown,
		500: codes.Unknown, 415: codes.Unknown, 302: codes.Unknown,
	}
	for hs, want := range tests {
		if got := HTTPStatusCode(hs); got != want {
			t.Errorf("HTTPStatusCode(%d) = %v, want %v", hs, got, want)
		}
	}
}

func TestRSTCode(t *testing.T) {
	tests := []struct {
		c        h2frame.ErrCode
		deadline bool
		want     codes.Code
	}{
		{h2frame.ErrCodeNo, false, codes.Internal},
		{h2frame.ErrCodeProtocol, false, codes.Internal},
		{h2frame.ErrCodeInternal, false, codes.Internal},
		{h2frame.ErrCodeFlowControl, false, codes.ResourceExhausted},
		{h2frame.ErrCodeRefusedStream, false, codes.Unavailable},
		{h2frame.ErrCodeCancel, false, codes.Canceled},
		{h2frame.ErrCodeCancel, true, codes.DeadlineExceeded},
		{h2frame.ErrCodeEnhanceYourCalm, false, codes.ResourceExhausted},
		{h2frame.ErrCodeInadequateSecurity, false, codes.PermissionDenied},
		{h2frame.ErrCodeHTTP11Required, false, codes.Internal},
		{h2frame.ErrCode(0x99), false, codes.Internal},
	}
	for _, tc := range tests {
		if got := RSTCode(tc.c, tc.deadline); got != tc.want {
			t.Errorf("RSTCode(%v, %v) = %v, want %v", tc.c, tc.deadline, got, tc.want)
		}
		if got := RSTStatus(tc.c, tc.deadline).Code(); got != tc.want {
			t.Errorf("RSTStatus(%v, %v) code = %v, want %v", tc.c, tc.deadline, got, tc.want)
		}
	}
}

func TestToStatusError(t *testing.T) {
	already := status.Error(codes.NotFound, "x")
	tests := []struct {
		in       error
		want     codes.Code
		isClosed bool
	}{
		{already, codes.NotFound, false},
		{context.Canceled, codes.Canceled, false},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), codes.DeadlineExceeded, false},
		{net.ErrClosed, codes.Unavailable, true},
		{ErrConnClosed, codes.Unavailable, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), codes.Unavailable, false},
		{h2frame.StreamError{StreamID: 1, Code: h2frame.ErrCodeRefusedStream}, codes.Unavailable, false},
		{h2frame.StreamError{StreamID: 1, Code: h2frame.ErrCodeProtocol}, codes.Internal, false},
		{h2frame.ConnError{Code: h2frame.ErrCodeProtocol}, codes.Unavailable, false},
	}
	for _, tc := range tests {
		err := ToStatusError(tc.in)
		if got := status.Code(err); got != tc.want {
			t.Errorf("ToStatusError(%v) code = %v, want %v", tc.in, got, tc.want)
		}
		if errors.Is(err, net.ErrClosed) != tc.isClosed {
			t.Errorf("ToStatusError(%v): errors.Is(net.ErrClosed) = %v, want %v", tc.in, !tc.isClosed, tc.isClosed)
		}
	}
	if ToStatusError(nil) != nil {
		t.Error("ToStatusError(nil) != nil")
	}
	if !errors.Is(ErrConnClosed, net.ErrClosed) {
		t.Error("ErrConnClosed does not match net.ErrClosed")
	}
}

func TestStatusTrailerRoundTrip(t *testing.T) {
	withDetails, err := status.New(codes.InvalidArgument, "bad 100% \n").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "a", Description: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*status.Status{
		status.New(codes.OK, ""),
		status.New(codes.NotFound, "nope"),
		status.New(codes.Code(42), "custom code"),
		withDetails,
	} {
		fields := AppendStatus(nil, st)
		r := ParseResponse(fields, false, true)
		if r.Status == nil || r.Reset {
			t.Fatalf("ParseResponse(%v) = %+v", fields, r)
		}
		if !proto.Equal(r.Status.Proto(), st.Proto()) {
			t.Errorf("round trip of %v gave %v", st.Proto(), r.Status.Proto())
		}
	}
}

func TestStatusDetailsMismatch(t *testing.T) {
	st, _ := status.New(codes.NotFound, "x").WithDetails(&errdetails.RetryInfo{})
	fields := AppendStatus(nil, st)
	if fields[0].Name != "grpc-status" {
		t.Fatalf("first field %v, want grpc-status", fields[0])
	}
	fields[0].Value = "3" // InvalidArgument disagrees with the details
	r := ParseResponse(fields, false, true)
	if r.Status.Code() != codes.Internal {
		t.Errorf("mismatched details: code %v, want Internal", r.Status.Code())
	}
}
