package webwire

import (
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// Carrier is where a Transport's response goes and its request comes
// from: an engine stream (H2Carrier) or net/http (HTTPCarrier).
type Carrier interface {
	// Send sends, in this order: the response headers with status and
	// fields (when status is not 0; names in lower case, no
	// pseudo-header), body (owned), and the trailers (when not nil, which
	// ends the response); end ends the response. Unless hold, what was
	// sent is flushed to the client.
	Send(status int, fields []hpack.HeaderField, body *bufpool.Buffer, trailers []hpack.HeaderField, end, hold bool) error
	// Recv returns the request body's next bytes (owned), io.EOF at its
	// end.
	Recv() (*bufpool.Buffer, error)
	// Reset ends the exchange: ErrCodeNo after a whole response (the
	// client may stop sending), another code aborts it.
	Reset(code h2frame.ErrCode)
	Done() <-chan struct{}
	Err() error
	Release()
}
