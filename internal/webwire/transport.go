package webwire

import (
	"context"
	"io"
	"net/http"
	"sync"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// Transport is a grpcwire.Transport that speaks a web protocol (or gRPC
// under net/http) over a Carrier.
type Transport struct {
	c     Carrier
	proto Protocol
	codec string
	pool  *bufpool.Pool
	// maxRecv bounds a Connect unary request body, which is read whole.
	maxRecv int
	// compressed: a Connect unary request body is compressed
	// (content-encoding or the compression parameter).
	compressed bool
	get        []byte // a Connect GET's message

	mu           sync.Mutex // serializes Send
	headersSent  bool       // the call's response headers were handed over
	wroteHeaders bool       // the carrier sent response headers
	held         []hpack.HeaderField
	body         *bufpool.Buffer // Connect unary: the response, held for the status

	recvDone bool // Connect unary: the body was returned
	text     textDecoder
}

// NewTransport makes the transport of req over c. maxRecv is the server's
// limit on a received message.
func NewTransport(c Carrier, req *Request, pool *bufpool.Pool, maxRecv int) *Transport {
	t := &Transport{c: c, proto: req.Proto, codec: req.Codec, pool: pool, maxRecv: maxRecv, get: req.Body}
	for _, f := range req.Fields {
		if f.Name == "grpc-encoding" {
			t.compressed = true
		}
	}
	return t
}

var _ grpcwire.Transport = (*Transport)(nil)

// Protocol is the protocol t speaks.
func (t *Transport) Protocol() Protocol { return t.proto }

// Send translates an item a grpcwire.ServerStream hands the engine.
func (t *Transport) Send(it h2conn.SendItem) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sendLocked(it)
}

func (t *Transport) sendLocked(it h2conn.SendItem) error {
	var headers, trailers []hpack.HeaderField
	if it.Parts&h2conn.PartHeaders != 0 {
		if it.Parts == h2conn.PartHeaders && it.End {
			trailers = it.Headers // the trailers alone
		} else {
			headers = it.Headers
		}
	}
	if it.Parts&h2conn.PartTrailers != 0 {
		trailers = it.Trailers
	}
	if headers != nil {
		t.headersSent = true
	}
	if t.proto == ConnectUnary {
		return t.sendUnary(headers, it.Data, trailers)
	}
	return t.sendFramed(headers, it.Data, trailers, it.End, it.Hold)
}

// contentType is the response's content-type.
func (t *Transport) contentType() string {
	switch t.proto {
	case GRPCWeb:
		return "application/grpc-web+" + t.codec
	case GRPCWebText:
		return "application/grpc-web-text+" + t.codec
	case ConnectStream:
		return "application/connect+" + t.codec
	case ConnectUnary:
		return "application/" + t.codec
	}
	return grpcwire.ContentType(t.codec)
}

// responseHeaders translates response header fields: the status, and the
// fields in the protocol's names. Status fields are dropped unless
// keepStatus (a trailers-only response that carries them in its headers).
func (t *Transport) responseHeaders(fields []hpack.HeaderField, keepStatus bool) (int, []hpack.HeaderField) {
	status := http.StatusOK
	out := make([]hpack.HeaderField, 0, len(fields))
	for _, f := range fields {
		switch f.Name {
		case ":status":
			status = parseStatus(f.Value)
			continue
		case "content-type":
			out = append(out, hpack.HeaderField{Name: "content-type", Value: t.contentType()})
			continue
		case "grpc-encoding":
			if t.proto == ConnectStream {
				out = append(out, hpack.HeaderField{Name: "connect-content-encoding", Value: f.Value})
				continue
			}
		case "grpc-status", "grpc-message", "grpc-status-details-bin":
			if !keepStatus {
				continue
			}
		}
		out = append(out, f)
	}
	return status, out
}

func parseStatus(v string) int {
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return http.StatusInternalServerError
		}
		n = n*10 + int(v[i]-'0')
	}
	return n
}

// sendFramed sends for the protocols whose messages keep gRPC's framing:
// gRPC itself, gRPC-Web and Connect's streaming form. They differ in their
// end: HTTP trailers, a trailer frame, an end-of-stream message.
func (t *Transport) sendFramed(headers []hpack.HeaderField, data *bufpool.Buffer, trailers []hpack.HeaderField, end, hold bool) error {
	var status int
	var hf []hpack.HeaderField
	if headers != nil {
		status, hf = t.responseHeaders(headers, false)
		t.wroteHeaders = true
	}
	if data != nil && t.proto == GRPCWebText {
		data = encodeText(t.pool, data)
	}
	if trailers == nil {
		return t.c.Send(status, hf, data, nil, end, hold)
	}
	if !t.wroteHeaders {
		t.wroteHeaders = true
		if t.proto == GRPC || t.proto == GRPCWeb || t.proto == GRPCWebText {
			// Trailers-Only: the status in the response's headers.
			status, hf = t.responseHeaders(trailers, true)
			return t.c.Send(status, hf, nil, nil, true, false)
		}
		// Connect's streaming responses are 200 whatever the outcome;
		// the end-of-stream message tells it.
		status = http.StatusOK
		hf = []hpack.HeaderField{{Name: "content-type", Value: t.contentType()}}
	}
	switch t.proto {
	case GRPC:
		var tf []hpack.HeaderField
		for _, f := range trailers {
			if f.Name != ":status" && f.Name != "content-type" {
				tf = append(tf, f)
			}
		}
		return t.c.Send(status, hf, data, tf, true, false)
	case ConnectStream:
		last := frame(t.pool, flagEndStream, endStreamJSON(readStatus(trailers), trailers))
		if data != nil {
			if err := t.c.Send(status, hf, data, nil, false, true); err != nil {
				last.Free()
				return err
			}
			status, hf = 0, nil
		}
		return t.c.Send(status, hf, last, nil, true, false)
	default: // gRPC-Web
		last := trailerFrame(t.pool, trailers)
		if t.proto == GRPCWebText {
			last = encodeText(t.pool, last)
		}
		if data != nil {
			if err := t.c.Send(status, hf, data, nil, false, true); err != nil {
				last.Free()
				return err
			}
			status, hf = 0, nil
		}
		return t.c.Send(status, hf, last, nil, true, false)
	}
}

// sendUnary sends for Connect's unary form: the response's headers and
// message are held until the status, which decides what the response is:
// the bare message with the metadata in headers (trailers prefixed
// "trailer-"), or the error as JSON with the HTTP status its code maps to.
func (t *Transport) sendUnary(headers []hpack.HeaderField, data *bufpool.Buffer, trailers []hpack.HeaderField) error {
	if headers != nil {
		t.held = append(t.held[:0], headers...)
	}
	if data != nil {
		if t.body == nil {
			t.body = data
		} else {
			b := t.pool.Get(t.body.Len() + data.Len())
			copy(b.Bytes(), t.body.Bytes())
			copy(b.Bytes()[t.body.Len():], data.Bytes())
			t.body.Free()
			data.Free()
			t.body = b
		}
	}
	if trailers == nil {
		return nil
	}
	st := readStatus(trailers)
	body := t.body
	t.body = nil
	var encoding string
	hf := make([]hpack.HeaderField, 0, len(t.held)+len(trailers)+2)
	for _, f := range t.held {
		switch f.Name {
		case ":status", "content-type":
			continue
		case "grpc-encoding":
			encoding = f.Value
			continue
		}
		hf = append(hf, f)
	}
	for _, f := range trailers {
		if isStatusField(f.Name) {
			continue
		}
		hf = append(hf, hpack.HeaderField{Name: "trailer-" + f.Name, Value: f.Value})
	}
	if st.code != codes.OK || body == nil {
		if body != nil {
			body.Free()
		}
		if st.code == codes.OK {
			st = status{code: codes.Internal, msg: "no response message"}
		}
		hf = append(hf, hpack.HeaderField{Name: "content-type", Value: "application/json"})
		return t.c.Send(HTTPStatus(st.code), hf, t.pool.Copy(errorJSON(st)), nil, true, false)
	}
	hf = append(hf, hpack.HeaderField{Name: "content-type", Value: t.contentType()})
	if body.Len() >= 5 && body.Bytes()[0]&flagCompressed != 0 && encoding != "" {
		hf = append(hf, hpack.HeaderField{Name: "content-encoding", Value: encoding})
	}
	body.Advance(min(5, body.Len())) // the gRPC prefix
	return t.c.Send(http.StatusOK, hf, body, nil, true, false)
}

// Recv returns the request's messages in gRPC's framing.
func (t *Transport) Recv() (*bufpool.Buffer, error) {
	switch t.proto {
	case ConnectUnary:
		return t.recvUnary()
	case GRPCWebText:
		for {
			b, err := t.c.Recv()
			if err == io.EOF {
				if e := t.text.finish(); e != nil {
					return nil, t.badRequest(e.Error())
				}
				return nil, io.EOF
			}
			if err != nil {
				return nil, err
			}
			out, err := t.text.decode(t.pool, b)
			if err != nil {
				return nil, t.badRequest(err.Error())
			}
			if out != nil {
				return out, nil
			}
		}
	}
	return t.c.Recv()
}

// badRequest is the error of a malformed request body.
func (t *Transport) badRequest(msg string) error {
	return grpcstatus.Error(codes.InvalidArgument, msg)
}

// recvUnary returns a Connect unary request's body, read whole, behind a
// gRPC prefix; then io.EOF. A body over the server's limit is cut at it:
// its prefix says its length so far, past the limit, and the parser
// refuses it with ResourceExhausted as it refuses any message too large.
func (t *Transport) recvUnary() (*bufpool.Buffer, error) {
	if t.recvDone {
		return nil, io.EOF
	}
	t.recvDone = true
	var flags byte
	if t.compressed {
		flags = flagCompressed
	}
	if t.get != nil || t.c == nil {
		return frame(t.pool, flags, t.get), nil
	}
	limit := t.maxRecv
	if limit <= 0 {
		limit = grpcwire.DefaultMaxRecvMsgSize
	}
	var body []byte
	for {
		b, err := t.c.Recv()
		if b != nil {
			body = append(body, b.Bytes()...)
			b.Free()
			if len(body) > limit {
				// Enough to refuse it: a prefix claiming the length seen.
				return prefixOnly(t.pool, flags, len(body)), nil
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return frame(t.pool, flags, body), nil
}

// Reset ends the exchange abnormally, but for a deadline under net/http.
//
// grpcwire resets with CANCEL when the call's deadline passes, as
// grpc-go's server does. An engine stream gets RST_STREAM CANCEL, as
// native gRPC does; but net/http can reset no stream with CANCEL: an
// abort there closes an HTTP/1.1 connection, or resets an HTTP/2 stream
// with INTERNAL_ERROR, which clients report as Unavailable or Internal
// rather than the deadline (the Connect conformance suite's Timeouts
// cases over HTTP/1.1). So under net/http the deadline is answered in the
// protocol, with DEADLINE_EXCEEDED, as grpc-go's ServeHTTP and net/http
// servers of the web protocols answer it, and the request body's reads
// are ended so that a receive the handler waits in returns. A send the
// handler is in the middle of (t.mu held) leaves no room for that: the
// exchange is aborted, as before.
func (t *Transport) Reset(code h2frame.ErrCode) {
	if hc, ok := t.c.(*HTTPCarrier); ok && code == h2frame.ErrCodeCancel && t.mu.TryLock() {
		fields := grpcwire.AppendTrailers(nil, !t.wroteHeaders, 0, t.codec,
			grpcstatus.New(codes.DeadlineExceeded, context.DeadlineExceeded.Error()), nil)
		err := t.sendLocked(h2conn.TrailersItem(fields))
		t.mu.Unlock()
		if err == nil {
			hc.stopBody()
			return
		}
	}
	t.c.Reset(code)
}

func (t *Transport) Done() <-chan struct{} { return t.c.Done() }
func (t *Transport) Err() error            { return t.c.Err() }
func (t *Transport) Release() {
	t.mu.Lock()
	if t.body != nil {
		t.body.Free()
		t.body = nil
	}
	t.mu.Unlock()
	t.c.Release()
}

func (t *Transport) HeadersSent() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.headersSent
}
