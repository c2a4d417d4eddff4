package h2conn

// TEMPORARY: internals panic until the engine lands.

import (
	"context"
	"net"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// Conn is one HTTP/2 connection, client or server.
type Conn struct {
	nc        net.Conn
	role      Role
	done      chan struct{}
	goingAway chan struct{}
}

// Stream is one HTTP/2 stream.
type Stream struct {
	id   uint32
	conn *Conn
}

var errLocalClose = &Error{Code: h2frame.ErrCodeNo, Initiator: InitiatorUser, Reason: "closed", Cause: net.ErrClosed}

func newConn(nc net.Conn, cfg Config, role Role, h Handler) *Conn {
	return &Conn{nc: nc, role: role, done: make(chan struct{}), goingAway: make(chan struct{})}
}
func (c *Conn) serve() error       { panic("h2conn: not implemented") }
func (c *Conn) startClient() error { panic("h2conn: not implemented") }
func (c *Conn) newStream(ctx context.Context, fields []hpack.HeaderField, endStream bool) (*Stream, error) {
	panic("h2conn: not implemented")
}
func (c *Conn) goAway(code h2frame.ErrCode, debug string, who Initiator) {}
func (c *Conn) gracefulShutdown()                                        {}
func (c *Conn) closeWith(err *Error)                                     {}
func (c *Conn) err() error                                               { return nil }
func (c *Conn) numActiveStreams() int                                    { return 0 }
func (c *Conn) peerSetting(id h2frame.SettingID) uint32                  { return 0 }

func (s *Stream) headers() []hpack.HeaderField { return nil }
func (s *Stream) recvHeaders() ([]hpack.HeaderField, bool, error) {
	panic("h2conn: not implemented")
}
func (s *Stream) recv() (*bufpool.Buffer, error) { panic("h2conn: not implemented") }
func (s *Stream) trailers() []hpack.HeaderField  { return nil }
func (s *Stream) expectMessage(n int)            {}
func (s *Stream) writeHeaders(f []hpack.HeaderField, end bool) error {
	panic("h2conn: not implemented")
}
func (s *Stream) writeData(b *bufpool.Buffer, end bool) error { panic("h2conn: not implemented") }
func (s *Stream) reset(code h2frame.ErrCode)                  {}
func (s *Stream) doneCh() <-chan struct{}                     { return nil }
func (s *Stream) errNow() error                               { return nil }
func (s *Stream) setResetHook(f func(error))                  {}
func (s *Stream) release()                                    {}
