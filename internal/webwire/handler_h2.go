package webwire

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// ServeHandler runs an http.Handler on one of the engine's HTTP/2
// streams: a request on the server's own listener that is no call goes to
// the user's handler, with net/http's request and response types but the
// engine's framing. remoteAddr is the connection's peer; ctx the request's
// parent context. It releases st when done.
func ServeHandler(ctx context.Context, h http.Handler, st *h2conn.Stream, pool *bufpool.Pool, remoteAddr string, extra []hpack.HeaderField) {
	defer st.Release()
	r, err := newStreamRequest(ctx, st, remoteAddr)
	if err != nil {
		c := &H2Carrier{St: st}
		Plain(c, pool, http.StatusBadRequest, err.Error())
		return
	}
	w := &streamWriter{st: st, pool: pool, header: make(http.Header), extra: extra}
	defer func() {
		if p := recover(); p != nil {
			st.Reset(h2frame.ErrCodeInternal) // the handler panicked
			if p != http.ErrAbortHandler {
				panic(p)
			}
		}
	}()
	h.ServeHTTP(w, r)
	w.end()
}

// newStreamRequest makes the http.Request of an engine stream's request.
func newStreamRequest(ctx context.Context, st *h2conn.Stream, remoteAddr string) (*http.Request, error) {
	r := &http.Request{
		Proto: "HTTP/2.0", ProtoMajor: 2, ProtoMinor: 0,
		Header:     make(http.Header),
		RemoteAddr: remoteAddr,
		Body:       &streamBody{st: st},
	}
	var path string
	for _, f := range st.Headers() {
		switch f.Name {
		case ":method":
			r.Method = f.Value
		case ":path":
			path = f.Value
		case ":authority":
			r.Host = f.Value
		case ":scheme":
		default:
			k := http.CanonicalHeaderKey(f.Name)
			r.Header[k] = append(r.Header[k], f.Value)
		}
	}
	if r.Host == "" {
		r.Host = r.Header.Get("Host")
	}
	u, err := url.ParseRequestURI(path)
	if err != nil {
		return nil, err
	}
	r.URL, r.RequestURI = u, path
	if cl := r.Header.Get("Content-Length"); cl != "" {
		r.ContentLength, _ = strconv.ParseInt(cl, 10, 64)
	} else {
		r.ContentLength = -1
	}
	return r.WithContext(ctx), nil
}

// streamBody is a request body read from an engine stream.
type streamBody struct {
	st  *h2conn.Stream
	cur *bufpool.Buffer
	off int
	err error
}

func (b *streamBody) Read(p []byte) (int, error) {
	for b.cur == nil {
		if b.err != nil {
			return 0, b.err
		}
		nb, err := b.st.Recv()
		if err != nil {
			b.err = err
			if err != io.EOF {
				b.err = io.ErrUnexpectedEOF
			}
			continue
		}
		if nb.Len() == 0 {
			nb.Free()
			continue
		}
		b.cur, b.off = nb, 0
	}
	n := copy(p, b.cur.Bytes()[b.off:])
	b.off += n
	if b.off == b.cur.Len() {
		b.cur.Free()
		b.cur = nil
	}
	return n, nil
}

func (b *streamBody) Close() error {
	if b.cur != nil {
		b.cur.Free()
		b.cur = nil
	}
	if b.err == nil {
		b.err = io.EOF
	}
	return nil
}

// streamWriter is an http.ResponseWriter (and Flusher) on an engine
// stream.
type streamWriter struct {
	st      *h2conn.Stream
	pool    *bufpool.Pool
	header  http.Header
	extra   []hpack.HeaderField
	status  int
	pending *bufpool.Buffer // written, not yet sent
	failed  error
}

func (w *streamWriter) Header() http.Header { return w.header }

func (w *streamWriter) WriteHeader(code int) {
	if w.status != 0 || code < 200 {
		return // informational responses are not sent; repeats are ignored, as net/http does
	}
	w.status = code
}

// flushThreshold is how much a handler's writes gather before they are
// sent without a Flush.
const flushThreshold = 16 << 10

func (w *streamWriter) Write(p []byte) (int, error) {
	if w.failed != nil {
		return 0, w.failed
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
		if w.header.Get("Content-Type") == "" {
			w.header.Set("Content-Type", http.DetectContentType(p))
		}
	}
	n := len(p)
	for len(p) > 0 {
		if w.pending == nil {
			w.pending = w.pool.Get(flushThreshold)
			w.pending.SetLen(0)
		}
		b := w.pending
		k := copy(b.Bytes()[b.Len():b.Cap()], p)
		b.SetLen(b.Len() + k)
		p = p[k:]
		if b.Len() == b.Cap() {
			if err := w.send(false); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

func (w *streamWriter) Flush() { w.send(false) }

// fields are the response headers as HTTP/2 fields.
func (w *streamWriter) fields() []hpack.HeaderField {
	f := []hpack.HeaderField{{Name: ":status", Value: statusValue(w.status)}}
	for k, vv := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		name := strings.ToLower(k)
		switch name {
		case "connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection":
			continue
		}
		for _, v := range vv {
			f = append(f, hpack.HeaderField{Name: name, Value: v})
		}
	}
	return append(f, w.extra...)
}

// send sends the response headers (the first time) and what was written.
func (w *streamWriter) send(end bool) error {
	if w.failed != nil {
		return w.failed
	}
	var it h2conn.SendItem
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.header != nil {
		it.Parts |= h2conn.PartHeaders
		it.Headers = w.fields()
		w.header = nil // sent; later changes are not
	}
	if w.pending != nil || end {
		it.Parts |= h2conn.PartData
		it.Data, w.pending = w.pending, nil
	}
	if it.Parts == 0 {
		return nil
	}
	it.End = end
	w.failed = w.st.Send(it)
	return w.failed
}

// end ends the response once the handler returned.
func (w *streamWriter) end() {
	w.send(true)
	select {
	case <-w.st.Done():
	default:
		w.st.Reset(h2frame.ErrCodeNo) // the request's remaining body is not wanted
	}
}
