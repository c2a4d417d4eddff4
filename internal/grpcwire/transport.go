package grpcwire

import (
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// Transport carries a server call that is not native gRPC on one of the
// engine's streams: gRPC-Web or the Connect protocol (on the engine or
// under net/http), or gRPC under net/http. A ServerStream hands it the
// items it would hand the engine (h2conn.SendItem: response header
// fields, messages in gRPC's length-prefixed framing, the status and
// trailers as header fields), and the transport translates them into its
// protocol; it gives the request's messages back in gRPC's framing. So
// every protocol shares one implementation of a call's rules: metadata,
// compression, size limits, deadlines, the order of headers, messages and
// status.
//
// Its methods mean what the h2conn.Stream methods of the same names mean.
// An abnormal end of the exchange (the client went away) is reported to
// the ServerStream by calling its StreamReset.
type Transport interface {
	// Send takes ownership of it.Data.
	Send(it h2conn.SendItem) error
	// Recv returns the request body's next bytes (owned by the caller),
	// or io.EOF at its end.
	Recv() (*bufpool.Buffer, error)
	// Reset ends the exchange: with ErrCodeNo after a complete response
	// the client may stop sending; another code aborts it.
	Reset(code h2frame.ErrCode)
	Done() <-chan struct{}
	Err() error
	HeadersSent() bool
	// Release is called once the call no longer uses the transport.
	Release()
}
