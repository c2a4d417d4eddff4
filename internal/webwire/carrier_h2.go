package webwire

import (
	"strconv"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// H2Carrier carries a web protocol's exchange on one of the engine's
// HTTP/2 streams: the web protocols run on leangrpc's own listener with the
// engine's framing, flow control and limits, as native gRPC does.
type H2Carrier struct {
	St *h2conn.Stream
	// Extra fields go with the response headers (CORS).
	Extra []hpack.HeaderField
}

// statusValue is :status's value, constant for the common ones.
func statusValue(status int) string {
	switch status {
	case 200:
		return "200"
	case 204:
		return "204"
	}
	return strconv.Itoa(status)
}

func (c *H2Carrier) Send(status int, fields []hpack.HeaderField, body *bufpool.Buffer, trailers []hpack.HeaderField, end, hold bool) error {
	var it h2conn.SendItem
	var scratch [12]hpack.HeaderField
	if status != 0 {
		hf := append(scratch[:0], hpack.HeaderField{Name: ":status", Value: statusValue(status)})
		it.Parts |= h2conn.PartHeaders
		it.Headers = append(append(hf, fields...), c.Extra...)
	}
	if body != nil {
		it.Parts |= h2conn.PartData
		it.Data = body
	}
	if trailers != nil {
		if it.Parts == 0 {
			// Trailers alone: HEADERS ending the stream.
			it.Parts, it.Headers, it.End = h2conn.PartHeaders, trailers, true
		} else {
			it.Parts |= h2conn.PartTrailers
			it.Trailers = trailers
		}
	}
	if it.Parts == 0 {
		it.Parts = h2conn.PartData // an empty DATA frame, ending the stream
	}
	it.End = it.End || end
	it.Hold = hold && !it.End
	return c.St.Send(it)
}

func (c *H2Carrier) Recv() (*bufpool.Buffer, error) { return c.St.Recv() }
func (c *H2Carrier) Reset(code h2frame.ErrCode)     { c.St.Reset(code) }
func (c *H2Carrier) Done() <-chan struct{}          { return c.St.Done() }
func (c *H2Carrier) Err() error                     { return c.St.Err() }
func (c *H2Carrier) Release()                       { c.St.Release() }
