package grpcwire

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Request is the gRPC view of a request's HEADERS.
type Request struct {
	Method         string // :path, "/package.Service/Method"
	Authority      string // :authority
	Scheme         string // :scheme; "http" when empty on send
	ContentSubtype string // from content-type; "" means proto
	// Timeout is the grpc-timeout value when HasTimeout.
	Timeout    time.Duration
	HasTimeout bool
	// PreviousAttempts is grpc-previous-rpc-attempts: how many attempts of
	// the call went before this one under a retry policy; sent when not 0.
	// An int32 after HasTimeout takes no room of its own (the server keeps
	// a Request in each call's state).
	PreviousAttempts int32
	// Encoding is grpc-encoding: the compressor of request messages.
	Encoding string
	// AcceptEncoding is grpc-accept-encoding, comma-separated.
	AcceptEncoding string
	UserAgent      string
	// MD is the custom metadata. ParseRequest fills it with what grpc-go
	// shows handlers: the custom fields plus ":authority", "user-agent",
	// "content-type" and "grpc-accept-encoding". ParseRequestScratch leaves
	// it nil and keeps the fields for BuildMD.
	MD metadata.MD

	// mdPairs holds the metadata fields as name, value, name, value...
	// (binary values decoded), in the order received; set by
	// ParseRequestScratch.
	mdPairs []string
}

// BuildMD returns a new map of the metadata fields ParseRequestScratch
// kept (nil if it kept none), built with two allocations: the map and one
// array shared by the values. Each key's slice has its capacity capped, so
// a user's append copies instead of writing into a neighbour's value.
func (r *Request) BuildMD() metadata.MD {
	n := len(r.mdPairs) / 2
	if n == 0 {
		return nil
	}
	md := newMDBuilder(n)
	md.vals = make([]string, 0, n)
	for i := 0; i+1 < len(r.mdPairs); i += 2 {
		md.add(r.mdPairs[i], r.mdPairs[i+1])
	}
	return md.md
}

// AppendRequestHeaders appends the HEADERS fields of a client request in
// the order grpc-go sends them; reserved names in r.MD are left out.
func AppendRequestHeaders(dst []hpack.HeaderField, r *Request) []hpack.HeaderField {
	scheme := r.Scheme
	if scheme == "" {
		scheme = "http"
	}
	dst = append(dst,
		hpack.HeaderField{Name: ":method", Value: "POST"},
		hpack.HeaderField{Name: ":scheme", Value: scheme},
		hpack.HeaderField{Name: ":path", Value: r.Method},
		hpack.HeaderField{Name: ":authority", Value: r.Authority},
		hpack.HeaderField{Name: "content-type", Value: ContentType(r.ContentSubtype)},
	)
	if r.UserAgent != "" {
		dst = append(dst, hpack.HeaderField{Name: "user-agent", Value: r.UserAgent})
	}
	dst = append(dst, hpack.HeaderField{Name: "te", Value: "trailers"})
	if r.Encoding != "" {
		dst = append(dst, hpack.HeaderField{Name: "grpc-encoding", Value: r.Encoding})
	}
	if r.AcceptEncoding != "" {
		dst = append(dst, hpack.HeaderField{Name: "grpc-accept-encoding", Value: r.AcceptEncoding})
	}
	if r.HasTimeout {
		dst = append(dst, hpack.HeaderField{Name: "grpc-timeout", Value: EncodeTimeout(r.Timeout)})
	}
	if r.PreviousAttempts > 0 {
		dst = append(dst, hpack.HeaderField{Name: "grpc-previous-rpc-attempts", Value: strconv.Itoa(int(r.PreviousAttempts))})
	}
	return AppendMetadata(dst, r.MD)
}

// Reject is the server's answer to a request it will not dispatch: either
// RST_STREAM with Code (when RST is set), a plain HTTP response with
// HTTPStatus and a short text body (when Plain is set: the request is not
// a gRPC call at all), or a Trailers-Only response with HTTPStatus and
// Status.
type Reject struct {
	RST        bool
	Plain      bool
	Code       h2frame.ErrCode
	HTTPStatus int
	Status     *status.Status
}

func (r *Reject) Error() string {
	if r.RST {
		return "grpcwire: request reset: " + r.Code.String()
	}
	return fmt.Sprintf("grpcwire: request rejected with HTTP %d: %v", r.HTTPStatus, r.Status.Err())
}

// ParseRequest reads a server-side request's HEADERS fields. The checks and
// their order follow grpc-go's server: a connection header resets the
// stream with PROTOCOL_ERROR; several :authority or host values, a bad
// grpc-timeout or undecodable binary metadata answer 400; a content-type
// that is not gRPC answers 415; a :method other than POST answers 405 (both
// plain HTTP answers, see Reject.Plain); a :path without a leading slash
// answers 200 with Unimplemented.
func ParseRequest(fields []hpack.HeaderField) (Request, *Reject) {
	r, rej := ParseRequestScratch(fields, nil)
	r.MD = r.BuildMD()
	return r, rej
}

// ParseRequestScratch is ParseRequest without building the metadata map:
// the metadata fields are kept in scratch while it has room (else in a
// slice of their own) for Request.BuildMD, which only a handler asking
// for its metadata pays for. The caller keeps scratch alive as long as the
// Request.
func ParseRequestScratch(fields []hpack.HeaderField, scratch []string) (Request, *Reject) {
	var (
		r           Request
		isGRPC      bool
		contentType string
		httpMethod  string
		headerErr   *status.Status
		protoErr    bool
		nAuthority  int
		nHost       int
		host        string
	)
	md := mdPairs{p: scratch[:0]}
	for _, f := range fields {
		switch f.Name {
		case "content-type":
			sub, ok := ContentSubtype(f.Value)
			if !ok {
				contentType = f.Value
				continue
			}
			md.add(f.Name, f.Value)
			r.ContentSubtype = sub
			isGRPC = true
		case "grpc-accept-encoding":
			md.add(f.Name, f.Value)
			if f.Value == "" {
				continue
			}
			if r.AcceptEncoding != "" {
				r.AcceptEncoding += "," + f.Value
			} else {
				r.AcceptEncoding = f.Value
			}
		case "grpc-encoding":
			r.Encoding = f.Value
		case ":method":
			httpMethod = f.Value
		case ":path":
			r.Method = f.Value
		case ":scheme":
			r.Scheme = f.Value
		case ":authority":
			nAuthority++
			r.Authority = f.Value
			md.add(f.Name, f.Value)
		case "host":
			nHost++
			host = f.Value
		case "user-agent":
			r.UserAgent = f.Value
			md.add(f.Name, f.Value)
		case "grpc-timeout":
			d, err := DecodeTimeout(f.Value)
			if err != nil {
				headerErr = status.Newf(codes.Internal, "malformed grpc-timeout: %v", err)
				continue
			}
			r.Timeout, r.HasTimeout = d, true
		case "connection":
			protoErr = true
		default:
			if IsReservedHeader(f.Name) {
				continue
			}
			if err := md.addDecoded(f.Name, f.Value); err != nil {
				headerErr = status.Newf(codes.Internal, "malformed binary metadata %q in header %q: %v", f.Value, f.Name, err)
			}
		}
	}
	r.mdPairs = md.p
	if nAuthority > 1 || nHost > 1 {
		return r, &Reject{HTTPStatus: http.StatusBadRequest, Status: status.Newf(codes.Internal,
			"num values of :authority: %v, num values of host: %v, both must only have 1 value as per HTTP/2 spec", nAuthority, nHost)}
	}
	if protoErr {
		return r, &Reject{RST: true, Code: h2frame.ErrCodeProtocol}
	}
	if !isGRPC {
		return r, &Reject{Plain: true, HTTPStatus: http.StatusUnsupportedMediaType,
			Status: status.Newf(codes.InvalidArgument, "invalid gRPC request content-type %q", contentType)}
	}
	if headerErr != nil {
		return r, &Reject{HTTPStatus: http.StatusBadRequest, Status: headerErr}
	}
	if nAuthority == 0 {
		if nHost == 0 {
			return r, &Reject{HTTPStatus: http.StatusBadRequest, Status: status.New(codes.Internal, "no host or :authority header present")}
		}
		r.Authority = host
		md.add(":authority", host)
		r.mdPairs = md.p
	}
	if httpMethod != http.MethodPost {
		return r, &Reject{Plain: true, HTTPStatus: http.StatusMethodNotAllowed, Status: status.Newf(codes.Internal,
			"Received a HEADERS frame with :method %q which should be POST", httpMethod)}
	}
	if r.Method == "" || r.Method[0] != '/' {
		return r, &Reject{HTTPStatus: http.StatusOK, Status: status.Newf(codes.Unimplemented, "malformed method name: %q", r.Method)}
	}
	return r, nil
}

// mdPairs collects metadata fields for Request.mdPairs.
type mdPairs struct{ p []string }

func (m *mdPairs) add(k, v string) { m.p = append(m.p, k, v) }

func (m *mdPairs) addDecoded(name, value string) error {
	value, err := receivedValue(name, value)
	if err != nil {
		return err
	}
	m.add(name, value)
	return nil
}

// SplitMethod splits "/service/method" into its parts; ok is false when
// the name has no leading slash or no method part.
func SplitMethod(full string) (service, method string, ok bool) {
	if len(full) == 0 || full[0] != '/' {
		return "", "", false
	}
	full = full[1:]
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[:i], full[i+1:], true
		}
	}
	return "", "", false
}
