package webwire

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/codes"
)

// Request is a web request translated into the gRPC request it stands
// for.
type Request struct {
	Proto Protocol
	// Codec is the name of the codec of its messages: "proto" or "json",
	// or another registered with grpc-go.
	Codec string
	// Fields are the header fields a gRPC client would have sent
	// (pseudo-headers first, content-type application/grpc+Codec), for
	// grpcwire.ParseRequest.
	Fields []hpack.HeaderField
	// Body is the request's message of a Connect GET, which has no body.
	Body []byte
	// GET says the request is a Connect GET.
	GET bool
}

// Error is a request this package refuses before it becomes a call: the
// HTTP status and the gRPC code and message the protocol's error carries.
type Error struct {
	HTTPStatus int
	Code       codes.Code
	Msg        string
}

func (e *Error) Error() string { return e.Msg }

// Translate makes the gRPC request a web request stands for, from the
// request's header fields (names in lower case, pseudo-headers among
// them: :method, :path with its query, :authority, :scheme). The
// protocol-specific fields become their gRPC equivalents: Connect's
// timeout, encodings and codec; hop-by-hop fields of HTTP/1.1 are dropped;
// everything else goes on as it is, so that it becomes the call's
// metadata. dst is scratch for the fields.
func Translate(proto Protocol, codec string, fields []hpack.HeaderField, dst []hpack.HeaderField) (*Request, *Error) {
	r := &Request{Proto: proto, Codec: codec}
	var method, path, authority, scheme, host string
	for _, f := range fields {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		case ":authority":
			authority = f.Value
		case ":scheme":
			scheme = f.Value
		case "host":
			host = f.Value
		}
	}
	if authority == "" {
		authority = host
	}
	query := ""
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path, query = path[:i], path[i+1:]
	}
	var encoding string
	if proto == ConnectUnary && method == "GET" {
		r.GET = true
		var err *Error
		if encoding, err = r.readQuery(query); err != nil {
			return nil, err
		}
	}
	if r.Codec == "" {
		r.Codec = "proto"
	}
	dst = append(dst,
		hpack.HeaderField{Name: ":method", Value: "POST"},
		hpack.HeaderField{Name: ":scheme", Value: scheme},
		hpack.HeaderField{Name: ":path", Value: path},
		hpack.HeaderField{Name: ":authority", Value: authority},
		hpack.HeaderField{Name: "content-type", Value: grpcwire.ContentType(r.Codec)},
	)
	if encoding != "" {
		dst = append(dst, hpack.HeaderField{Name: "grpc-encoding", Value: encoding})
	}
	for _, f := range fields {
		name := f.Name
		if name == "" || name[0] == ':' {
			continue
		}
		switch name {
		case "content-type", "host", "connection", "keep-alive", "proxy-connection",
			"transfer-encoding", "upgrade", "content-length":
			continue
		case "te":
			if proto != GRPC {
				continue
			}
		}
		if proto == GRPC {
			dst = append(dst, f)
			continue
		}
		switch name {
		case "accept-encoding":
			// The transport's compression in HTTP; Connect's unary
			// form uses it for the message's.
			if proto == ConnectUnary {
				dst = append(dst, hpack.HeaderField{Name: "grpc-accept-encoding", Value: f.Value})
			}
			continue
		case "content-encoding":
			if proto == ConnectUnary && !r.GET && f.Value != "identity" {
				dst = append(dst, hpack.HeaderField{Name: "grpc-encoding", Value: f.Value})
			}
			continue
		}
		if proto.Web() && proto != ConnectUnary && proto != ConnectStream {
			dst = append(dst, f) // gRPC-Web's fields are gRPC's
			continue
		}
		switch name {
		case "connect-protocol-version":
			if f.Value != "1" {
				return nil, &Error{http.StatusBadRequest, codes.InvalidArgument, "connect-protocol-version must be \"1\": got " + strconv.Quote(f.Value)}
			}
		case "connect-timeout-ms":
			d, ok := connectTimeout(f.Value)
			if !ok {
				return nil, &Error{http.StatusBadRequest, codes.InvalidArgument, "malformed connect-timeout-ms: " + strconv.Quote(f.Value)}
			}
			dst = append(dst, hpack.HeaderField{Name: "grpc-timeout", Value: grpcwire.EncodeTimeout(d)})
		case "connect-content-encoding":
			if proto == ConnectStream && f.Value != "identity" {
				dst = append(dst, hpack.HeaderField{Name: "grpc-encoding", Value: f.Value})
			}
		case "connect-accept-encoding":
			if proto == ConnectStream {
				dst = append(dst, hpack.HeaderField{Name: "grpc-accept-encoding", Value: f.Value})
			}
		case "grpc-timeout", "grpc-encoding", "grpc-accept-encoding":
			// gRPC's own fields mean nothing in the Connect protocol.
		default:
			dst = append(dst, f)
		}
	}
	r.Fields = dst
	return r, nil
}

// maxTimeoutMs is the largest connect-timeout-ms the protocol allows: ten
// digits.
const maxTimeoutDigits = 10

// connectTimeout parses a connect-timeout-ms value: a positive integer of
// at most ten digits.
func connectTimeout(v string) (time.Duration, bool) {
	if v == "" || len(v) > maxTimeoutDigits {
		return 0, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// readQuery reads a Connect GET's query: the message, its codec
// (encoding), whether it is base64 (base64=1), its compression and the
// protocol version (connect=v1). It returns the compression.
func (r *Request) readQuery(query string) (compression string, _ *Error) {
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", &Error{http.StatusBadRequest, codes.InvalidArgument, "malformed query: " + err.Error()}
	}
	if v := q.Get("connect"); v != "" && v != "v1" {
		return "", &Error{http.StatusBadRequest, codes.InvalidArgument, "connect must be \"v1\": got " + strconv.Quote(v)}
	}
	r.Codec = q.Get("encoding")
	if r.Codec == "" {
		return "", &Error{http.StatusUnsupportedMediaType, codes.InvalidArgument, "missing encoding parameter"}
	}
	msg := q.Get("message")
	if q.Get("base64") == "1" {
		b, err := decodeBase64URL(msg)
		if err != nil {
			return "", &Error{http.StatusBadRequest, codes.InvalidArgument, "malformed base64 message: " + err.Error()}
		}
		r.Body = b
	} else {
		r.Body = []byte(msg)
	}
	compression = q.Get("compression")
	if compression == "identity" {
		compression = ""
	}
	return compression, nil
}

// decodeBase64URL decodes the URL-safe alphabet with or without padding,
// as the Connect protocol allows (and the standard alphabet, which some
// clients send).
func decodeBase64URL(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "+/") {
		return base64.RawStdEncoding.DecodeString(s)
	}
	return base64.RawURLEncoding.DecodeString(s)
}
