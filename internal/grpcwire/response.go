package grpcwire

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// AppendResponseHeaders appends the fields of a server's response HEADERS:
// ":status: 200", the content-type echoing the request's subtype, the
// grpc-encoding when messages are compressed, then md without reserved names.
func AppendResponseHeaders(dst []hpack.HeaderField, subtype, encoding string, md metadata.MD) []hpack.HeaderField {
	dst = append(dst,
		hpack.HeaderField{Name: ":status", Value: "200"},
		hpack.HeaderField{Name: "content-type", Value: ContentType(subtype)},
	)
	if encoding != "" {
		dst = append(dst, hpack.HeaderField{Name: "grpc-encoding", Value: encoding})
	}
	return AppendMetadata(dst, md)
}

// AppendTrailers appends the fields of a server's trailing HEADERS. When
// trailersOnly is set (no response HEADERS were sent) the block starts with
// ":status" and content-type, making a Trailers-Only response. The status
// fields come next, then md without reserved names.
func AppendTrailers(dst []hpack.HeaderField, trailersOnly bool, httpStatus int, subtype string, st *status.Status, md metadata.MD) []hpack.HeaderField {
	if trailersOnly {
		hs := "200"
		if httpStatus != 0 && httpStatus != http.StatusOK {
			hs = strconv.Itoa(httpStatus)
		}
		dst = append(dst,
			hpack.HeaderField{Name: ":status", Value: hs},
			hpack.HeaderField{Name: "content-type", Value: ContentType(subtype)},
		)
	}
	dst = AppendStatus(dst, st)
	for k, vv := range md {
		if IsReservedHeader(k) || k == "grpc-status-details-bin" {
			continue
		}
		bin := IsBinaryKey(k)
		for _, v := range vv {
			if bin {
				v = EncodeBinary(v)
			}
			dst = append(dst, hpack.HeaderField{Name: k, Value: v})
		}
	}
	return dst
}

// Response is the client's view of one HEADERS block received on a call.
type Response struct {
	// Informational is set for a 1xx response, which the client skips.
	Informational bool
	// MD is the custom metadata of the block (headers or trailers). It
	// includes "content-type", as grpc-go's client shows it.
	MD metadata.MD
	// Encoding is grpc-encoding: the compressor of response messages.
	Encoding string
	// Status is set when the block ends the call: trailers, a
	// Trailers-Only response, or a response that is not gRPC (mapped from
	// its HTTP status). It is nil for response headers.
	Status *status.Status
	// Reset, when set, tells the client to reset the stream with
	// PROTOCOL_ERROR: the block broke a rule and Status says which.
	Reset bool

	md   mdBuilder
	noMD bool
}

// ParseResponse reads a HEADERS block received by a client. first is set
// for the first block of the stream; endStream for a block with
// END_STREAM. The rules follow grpc-go's client: a block that is neither
// first nor final is a protocol error; a first block without a gRPC
// content-type is a non-gRPC response whose HTTP status maps to a code; a
// final block without grpc-status reports Unknown.
func ParseResponse(fields []hpack.HeaderField, first, endStream bool) Response {
	return parseResponse(fields, first, endStream, false)
}

// ParseResponseNoMD is ParseResponse for a caller that will not look at
// the metadata: MD stays nil, which saves its allocations.
func ParseResponseNoMD(fields []hpack.HeaderField, first, endStream bool) Response {
	return parseResponse(fields, first, endStream, true)
}

func parseResponse(fields []hpack.HeaderField, first, endStream, noMD bool) Response {
	var r Response
	r.md.hint = len(fields)
	r.noMD = noMD
	if !first && !endStream {
		r.Status = status.New(codes.Internal, "a HEADERS frame cannot appear in the middle of a stream")
		r.Reset = true
		return r
	}
	var (
		isGRPC         = !first
		contentTypeErr = "malformed header: missing HTTP content-type"
		httpStatus     string
		code           = codes.Unknown
		msg            string
		details        []string
		headerErr      string
	)
	for _, f := range fields {
		switch f.Name {
		case "content-type":
			if _, ok := ContentSubtype(f.Value); !ok {
				contentTypeErr = fmt.Sprintf("transport: received unexpected content-type %q", f.Value)
				continue
			}
			contentTypeErr = ""
			r.addMD(f.Name, f.Value)
			isGRPC = true
		case "grpc-encoding":
			r.Encoding = f.Value
		case "grpc-status":
			c, err := strconv.ParseInt(f.Value, 10, 32)
			if err != nil {
				r.Status = status.Newf(codes.Unknown, "transport: malformed grpc-status: %v", err)
				r.Reset = true
				return r
			}
			code = codes.Code(uint32(c))
		case "grpc-message":
			msg = DecodeGRPCMessage(f.Value)
		case ":status":
			httpStatus = f.Value
		case "grpc-status-details-bin":
			v, err := DecodeBinary(f.Value)
			if err != nil {
				headerErr = fmt.Sprintf("transport: malformed %s: %v", f.Name, err)
				continue
			}
			details = append(details, v)
			r.addMD(f.Name, v)
		default:
			if IsReservedHeader(f.Name) {
				continue
			}
			if IsBinaryKey(f.Name) {
				v, err := DecodeBinary(f.Value)
				if err != nil {
					headerErr = fmt.Sprintf("transport: malformed %s: %v", f.Name, err)
					continue
				}
				r.addMD(f.Name, v)
				continue
			}
			r.addMD(f.Name, f.Value)
		}
	}
	if !isGRPC {
		gc := codes.Internal
		var errs []string
		if httpStatus == "" {
			errs = append(errs, "malformed header: missing HTTP status")
		} else {
			hs, err := strconv.Atoi(httpStatus)
			if err != nil {
				r.Status = status.Newf(codes.Internal, "transport: malformed http-status: %v", err)
				r.Reset = true
				return r
			}
			if hs >= 100 && hs < 200 {
				if endStream {
					r.Status = status.Newf(codes.Internal, "protocol error: informational header with status code %d must not have END_STREAM set", hs)
					r.Reset = true
					return r
				}
				r.Informational = true
				return r
			}
			errs = append(errs, fmt.Sprintf("unexpected HTTP status code received from server: %d (%s)", hs, http.StatusText(hs)))
			gc = HTTPStatusCode(hs)
		}
		if contentTypeErr != "" {
			errs = append(errs, contentTypeErr)
		}
		r.Status = status.New(gc, strings.Join(errs, "; "))
		r.Reset = !endStream
		return r
	}
	if headerErr != "" {
		r.Status = status.New(codes.Internal, headerErr)
		r.Reset = true
		return r
	}
	if endStream {
		r.Status = statusFromTrailer(code, msg, details)
	}
	return r
}

func (r *Response) addMD(k, v string) {
	if r.noMD {
		return
	}
	r.md.add(k, v)
	r.MD = r.md.md
}
