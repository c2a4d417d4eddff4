package webwire

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/hpack"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// codeNames are the Connect protocol's names of gRPC's codes.
var codeNames = [...]string{
	codes.Canceled:           "canceled",
	codes.Unknown:            "unknown",
	codes.InvalidArgument:    "invalid_argument",
	codes.DeadlineExceeded:   "deadline_exceeded",
	codes.NotFound:           "not_found",
	codes.AlreadyExists:      "already_exists",
	codes.PermissionDenied:   "permission_denied",
	codes.ResourceExhausted:  "resource_exhausted",
	codes.FailedPrecondition: "failed_precondition",
	codes.Aborted:            "aborted",
	codes.OutOfRange:         "out_of_range",
	codes.Unimplemented:      "unimplemented",
	codes.Internal:           "internal",
	codes.Unavailable:        "unavailable",
	codes.DataLoss:           "data_loss",
	codes.Unauthenticated:    "unauthenticated",
}

// CodeName is the Connect protocol's name of c; codes it does not know
// are "unknown".
func CodeName(c codes.Code) string {
	if int(c) < len(codeNames) && codeNames[c] != "" {
		return codeNames[c]
	}
	return "unknown"
}

// HTTPStatus is the HTTP status of a Connect unary error with code c (the
// protocol's table).
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// status is a call's outcome, read back from its trailer fields.
type status struct {
	code    codes.Code
	msg     string // decoded
	details string // grpc-status-details-bin, still base64
}

// readStatus reads the status fields of trailer fields.
func readStatus(fields []hpack.HeaderField) status {
	st := status{code: codes.Unknown}
	for _, f := range fields {
		switch f.Name {
		case "grpc-status":
			st.code = parseCode(f.Value)
		case "grpc-message":
			st.msg = grpcwire.DecodeGRPCMessage(f.Value)
		case "grpc-status-details-bin":
			st.details = f.Value
		}
	}
	return st
}

func parseCode(v string) codes.Code {
	n := 0
	if v == "" || len(v) > 3 {
		return codes.Unknown
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return codes.Unknown
		}
		n = n*10 + int(v[i]-'0')
	}
	return codes.Code(n)
}

// isStatusField reports whether a trailer field is one of the status's own
// or a response-header pseudo field a trailers-only block starts with.
func isStatusField(name string) bool {
	switch name {
	case ":status", "content-type", "grpc-status", "grpc-message", "grpc-status-details-bin":
		return true
	}
	return false
}

// connectError is the JSON form of an error in the Connect protocol.
type connectError struct {
	Code    string          `json:"code"`
	Message string          `json:"message,omitempty"`
	Details []connectDetail `json:"details,omitempty"`
}

type connectDetail struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// errorJSON is st as the Connect protocol's error JSON.
func errorJSON(st status) []byte {
	e := connectError{Code: CodeName(st.code), Message: st.msg}
	if st.details != "" {
		if raw, err := grpcwire.DecodeBinary(st.details); err == nil {
			var p spb.Status
			if proto.Unmarshal([]byte(raw), &p) == nil {
				for _, d := range p.GetDetails() {
					e.Details = append(e.Details, connectDetail{
						Type:  strings.TrimPrefix(d.GetTypeUrl()[strings.LastIndexByte(d.GetTypeUrl(), '/')+1:], "/"),
						Value: base64.RawStdEncoding.EncodeToString(d.GetValue()),
					})
				}
			}
		}
	}
	b, _ := json.Marshal(e) // cannot fail: strings and slices of them
	return b
}

// endStreamJSON is the Connect protocol's end-of-stream message: the
// error when st is not OK, and the trailers as metadata.
func endStreamJSON(st status, trailers []hpack.HeaderField) []byte {
	type endStream struct {
		Error    *json.RawMessage    `json:"error,omitempty"`
		Metadata map[string][]string `json:"metadata,omitempty"`
	}
	var es endStream
	if st.code != codes.OK {
		raw := json.RawMessage(errorJSON(st))
		es.Error = &raw
	}
	for _, f := range trailers {
		if isStatusField(f.Name) {
			continue
		}
		if es.Metadata == nil {
			es.Metadata = make(map[string][]string)
		}
		es.Metadata[f.Name] = append(es.Metadata[f.Name], f.Value)
	}
	b, _ := json.Marshal(es)
	return b
}
