package webwire

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// HTTPCarrier carries an exchange that net/http serves (Server.ServeHTTP):
// net/http owns the connection, its framing and its limits. The handler
// that made it must not return before Wait does, since a ResponseWriter
// is not to be used after that.
type HTTPCarrier struct {
	w    http.ResponseWriter
	r    *http.Request
	rc   *http.ResponseController
	pool *bufpool.Pool

	released chan struct{}
	relOnce  sync.Once

	mu      sync.Mutex
	ended   bool // the response is complete
	aborted bool // Reset with an error code before the response was complete
	bodyEOF bool
	abort   chan struct{} // closed by an abort
}

// NewHTTPCarrier makes the carrier of one request.
func NewHTTPCarrier(w http.ResponseWriter, r *http.Request, pool *bufpool.Pool) *HTTPCarrier {
	return &HTTPCarrier{w: w, r: r, rc: http.NewResponseController(w), pool: pool,
		released: make(chan struct{}), abort: make(chan struct{})}
}

// errAborted is what a send on an aborted exchange returns.
var errAborted = errors.New("webwire: exchange aborted")

func (c *HTTPCarrier) Send(status int, fields []hpack.HeaderField, body *bufpool.Buffer, trailers []hpack.HeaderField, end, hold bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted || c.ended {
		if body != nil {
			body.Free()
		}
		return errAborted
	}
	h := c.w.Header()
	if status != 0 {
		setFields(h, "", fields)
		if end && body == nil && trailers == nil {
			h.Set("Content-Length", "0")
		}
		c.w.WriteHeader(status)
	}
	var err error
	if body != nil {
		_, err = c.w.Write(body.Bytes())
		body.Free()
	}
	setFields(h, http.TrailerPrefix, trailers)
	if trailers != nil || end {
		c.ended = true
		return err
	}
	if err == nil && !hold {
		err = c.rc.Flush()
	}
	return err
}

// setFields adds fields to h, names prefixed: the values of names seen
// once share one array, rather than a slice each.
func setFields(h http.Header, prefix string, fields []hpack.HeaderField) {
	if len(fields) == 0 {
		return
	}
	vals := make([]string, len(fields))
	for i, f := range fields {
		k := canonicalKey(f.Name)
		if prefix != "" {
			k = prefix + k
		}
		if old, ok := h[k]; ok {
			h[k] = append(old, f.Value)
			continue
		}
		vals[i] = f.Value
		h[k] = vals[i : i+1 : i+1]
	}
}

// canonicalKey is http.CanonicalHeaderKey without its allocation for the
// names every response has.
func canonicalKey(name string) string {
	switch name {
	case "content-type":
		return "Content-Type"
	case "grpc-status":
		return "Grpc-Status"
	case "grpc-message":
		return "Grpc-Message"
	case "grpc-encoding":
		return "Grpc-Encoding"
	case "content-encoding":
		return "Content-Encoding"
	case "content-length":
		return "Content-Length"
	}
	return http.CanonicalHeaderKey(name)
}

// recvChunk is the size of the buffers the request body is read into.
const recvChunk = 16 << 10

func (c *HTTPCarrier) Recv() (*bufpool.Buffer, error) {
	if c.bodyEOF {
		return nil, io.EOF
	}
	b := c.pool.Get(recvChunk)
	n, err := c.r.Body.Read(b.Bytes())
	if n > 0 {
		b.SetLen(n)
		if err == io.EOF {
			c.bodyEOF = true
		}
		return b, nil
	}
	b.Free()
	if err == nil {
		err = io.ErrNoProgress
	}
	if err == io.EOF {
		c.bodyEOF = true
		return nil, io.EOF
	}
	return nil, err
}

func (c *HTTPCarrier) Reset(code h2frame.ErrCode) {
	c.mu.Lock()
	if code == h2frame.ErrCodeNo || c.ended || c.aborted {
		c.mu.Unlock()
		return
	}
	c.aborted = true
	close(c.abort)
	c.mu.Unlock()
	c.stopBody()
}

// stopBody ends the request body's reads: a receive waiting in Read
// returns (also after Transport.Reset answered a deadline, which aborts
// nothing). Closing the body does that under HTTP/2 only: under HTTP/1.1
// net/http's Close waits for a Read in progress, which waits for the
// client, and then reads on to drain the body; a read deadline ends the
// Read at once under both.
func (c *HTTPCarrier) stopBody() {
	if c.rc.SetReadDeadline(time.Now()) != nil {
		c.r.Body.Close() // a ResponseWriter without deadlines
	}
}

// Done is closed when the client went away or the exchange was aborted.
func (c *HTTPCarrier) Done() <-chan struct{} {
	select {
	case <-c.abort:
		return c.abort
	default:
	}
	return c.r.Context().Done()
}

func (c *HTTPCarrier) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted {
		return errAborted
	}
	if c.ended {
		return nil
	}
	return c.r.Context().Err()
}

func (c *HTTPCarrier) Release() { c.relOnce.Do(func() { close(c.released) }) }

// Wait waits until the call let go of the carrier and reports whether the
// exchange was aborted: the handler should then panic with
// http.ErrAbortHandler, so that net/http resets the stream or closes the
// connection rather than end an incomplete response as if it were whole.
// Meanwhile it watches the request's context: when the client goes away,
// call (when not nil) is told, so that the call's context ends.
func (c *HTTPCarrier) Wait(call h2conn.ResetHandler) (aborted bool) {
	select {
	case <-c.released:
	case <-c.r.Context().Done():
		if call != nil {
			call.StreamReset(c.r.Context().Err())
		}
		<-c.released
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.aborted
}
