// Package h2conn is leangrpc's HTTP/2 connection engine (RFC 9113), one
// implementation for both roles. It knows nothing about gRPC: the grpcwire
// layer builds on Conn and Stream, and a trivial Handler is enough for h2spec.
//
// Goroutines: a connection has one reading goroutine (the server's Serve
// caller, or one started by NewClientConn). With ServeAsync and on the
// client, over a socket that supports idle waits (sockio's OnReadable, on
// Linux), that goroutine returns after its idle wait without a frame (1 ms
// on a new connection, growing with use up to 200 ms; see
// minIdleReadWait) and a new one starts when bytes arrive, so an idle
// connection has none. There is no resident writer:
// whoever queues frames flushes them when no flush is in progress, and the
// reader, which never blocks on a socket write, starts a short-lived writer
// goroutine when it queued control frames and nobody is writing.
package h2conn

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/leangrpc/leangrpc/internal/budget"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// Role says which end of the connection the engine plays.
type Role uint8

const (
	RoleClient Role = iota + 1
	RoleServer
)

func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleServer:
		return "server"
	}
	return "role?"
}

// Config configures a Conn. Zero fields take the defaults in limits.go.
type Config struct {
	// MaxConcurrentStreams is our SETTINGS_MAX_CONCURRENT_STREAMS: how many
	// streams the peer may open at once (0: DefaultMaxConcurrentStreams).
	MaxConcurrentStreams uint32
	// InitialStreamWindow is our SETTINGS_INITIAL_WINDOW_SIZE (0:
	// DefaultInitialStreamWindow).
	InitialStreamWindow uint32
	// InitialConnWindow is the connection receive window, announced with a
	// WINDOW_UPDATE on stream 0 right after the preface (0:
	// DefaultInitialConnWindow).
	InitialConnWindow uint32
	// MaxFrameSize is our SETTINGS_MAX_FRAME_SIZE (0: 16 KiB).
	MaxFrameSize uint32
	// MaxHeaderListSize is our SETTINGS_MAX_HEADER_LIST_SIZE (0:
	// DefaultMaxHeaderListSize).
	MaxHeaderListSize uint32
	// HeaderTableSize is our SETTINGS_HEADER_TABLE_SIZE (0: 4096).
	HeaderTableSize uint32
	// Pool supplies every read and write buffer (nil: bufpool.Default()).
	Pool *bufpool.Pool
	// PooledReads lets the frame reader hold its read buffer only while
	// bytes are pending (see sockio). Callers usually pass
	// sockio.PooledReadsDefault().
	PooledReads bool
	// RecvLowWater lets the reader wait for the rest of a large frame
	// under a receive low-water mark (SO_RCVLOWAT), so that the kernel
	// wakes it once for all of it, on sockets with pooled reads that
	// offer it (sockio's ReadFull, Linux); elsewhere it does nothing.
	// Callers usually pass sockio.LowWaterDefault().
	RecvLowWater bool
	// SettingsTimeout bounds the wait for the peer's SETTINGS ACK (0:
	// DefaultSettingsTimeout; negative: no timeout).
	SettingsTimeout time.Duration
	// PrefaceTimeout bounds, on a server, the wait for the client's
	// preface and first SETTINGS frame from the start of Serve (0:
	// DefaultPrefaceTimeout; negative: no timeout).
	PrefaceTimeout time.Duration
	// FrameStallTimeout bounds how long a read inside a frame may go
	// without a byte (stall.go): after between it and twice it the
	// connection ends with GOAWAY ENHANCE_YOUR_CALM. Applies on sockets
	// with pooled reads (sockio's Linux conns); 0 or negative: no bound.
	// A server sets it to its ConnectionTimeout.
	FrameStallTimeout time.Duration
	// DisableBDP turns off the window growth from measured bandwidth-delay
	// product.
	DisableBDP bool

	// Client keepalive (RoleClient; grpc-go keepalive.ClientParameters).
	// KeepaliveTime is the idle time after which the client pings (0: off).
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long the client waits for the PING ACK
	// before closing the connection (0: 20s).
	KeepaliveTimeout time.Duration
	// KeepalivePermitWithoutStream lets the client ping with no active
	// streams.
	KeepalivePermitWithoutStream bool

	// Server keepalive enforcement (RoleServer; grpc-go
	// keepalive.EnforcementPolicy). A ping arriving sooner than
	// PingMinTime after the previous one (0: 5 minutes; negative: no
	// minimum), or with no active streams when PingPermitWithoutStream is
	// false, is a strike; more than MaxPingStrikes strikes get GOAWAY
	// ENHANCE_YOUR_CALM "too_many_pings". A PING ACK we sent for any reason
	// other than keepalive (data, headers) resets the strikes, as grpc-go.
	PingMinTime             time.Duration
	PingPermitWithoutStream bool

	// Server connection management (RoleServer; grpc-go
	// keepalive.ServerParameters). MaxConnectionIdle: GOAWAY after this
	// long without streams (0: never). MaxConnectionAge: graceful GOAWAY
	// after this long (0: never), then a hard close after
	// MaxConnectionAgeGrace more (0: never). ServerKeepaliveTime and
	// ServerKeepaliveTimeout: the server pings an idle connection (0: off)
	// and closes it when the ACK does not come.
	MaxConnectionIdle      time.Duration
	MaxConnectionAge       time.Duration
	MaxConnectionAgeGrace  time.Duration
	ServerKeepaliveTime    time.Duration
	ServerKeepaliveTimeout time.Duration

	// WriteBatchBytes is how many bytes the writer encodes before it
	// flushes (0: DefaultWriteBatchBytes).
	WriteBatchBytes int

	// Budget is the memory budget a server connection charges what it
	// holds for the peer to (membudget.go; nil: budget.Default()).
	Budget *budget.Account

	// inBubble is set by newConn, not by callers: the connection is made
	// inside a testing/synctest bubble (bubble.go). It is kept here, in
	// the copy the connections of one configuration share, rather than in
	// every Conn.
	inBubble bool
}

// Handler receives the streams a client opens on a server connection.
type Handler interface {
	// HandleStream is called on the reading goroutine when a request's
	// HEADERS arrive; s.Headers() holds the request header list. It must
	// not block: start a goroutine for the work.
	HandleStream(s *Stream)
}

// EndHandler is a Handler that hears when its connection ends: ServeAsync
// with a nil onEnd calls ConnEnded(c) where it would call onEnd, so that a
// server with many connections need not make a closure for each.
type EndHandler interface {
	Handler
	ConnEnded(c *Conn)
}

// GreetHandler is a server's Handler that hears when the client has
// greeted: its preface and first SETTINGS arrived. ConnGreeted runs once, on
// the reading goroutine, before any HandleStream; a connection that never
// greets (a port probe, a stalled handshake) never calls it. grpc-go's
// server begins a connection's stats at that point, not at accept.
type GreetHandler interface {
	Handler
	ConnGreeted(c *Conn)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(s *Stream)

// HandleStream calls f(s).
func (f HandlerFunc) HandleStream(s *Stream) { f(s) }

// NewServerConn returns a server connection over nc. Nothing is read or
// written until Serve. cfg.Pool nil means bufpool.Default().
func NewServerConn(nc net.Conn, cfg Config, h Handler) *Conn {
	return newConn(nc, cfg, RoleServer, h)
}

// SharedConfig returns a read-only copy of cfg, normalized, that is shared
// with every caller and connection of the same configuration, so that an
// owner of many connections need not keep a Config of its own each.
func SharedConfig(cfg Config) *Config {
	cfg.normalize()
	return internConfig(cfg)
}

// NewClientConn writes the client preface and SETTINGS on nc and starts the
// connection's reading goroutine. It does not wait for the server's
// SETTINGS.
func NewClientConn(nc net.Conn, cfg Config) (*Conn, error) {
	c := newConn(nc, cfg, RoleClient, nil)
	if err := c.startClient(); err != nil {
		return nil, err
	}
	return c, nil
}

// StreamOptions say how NewStream opens a stream; the zero value opens
// one whose caller writes a body and watches its context itself.
type StreamOptions struct {
	// EndStream ends the stream with its HEADERS: a request without a
	// body.
	EndStream bool
	// Unary marks a unary call, whose caller writes one message and then
	// waits for the response: the HEADERS may wait in the connection's
	// write buffer for that message (SendItem.Hold), so that the request
	// leaves in one write, and the request's last flush may wait for the
	// response from inside the flush (reader.go).
	Unary bool
	// Canceled, when not nil, is closed when the call is canceled. With
	// WatchCanceled the stream's blocking calls (the waits of RecvHeaders,
	// Recv, RecvInto, Send and Release) watch it: the
	// waiting call resets the stream with CANCEL, as Reset does, and
	// returns the reset's error. That is context.AfterFunc's work without
	// its allocations, for a caller that always waits in one of these
	// calls until the stream ends (a unary call): nothing resets the
	// stream while nobody waits. Without WatchCanceled the caller resets
	// the stream itself once Canceled closes (with context.AfterFunc), and
	// a receive that would read the socket itself rather than wait (the
	// offered read role, reader.go) looks at Canceled first, so that an
	// earlier cancel wins over an answer it would read.
	Canceled      <-chan struct{}
	WatchCanceled bool
}

// GoAway stops the connection from accepting new streams and sends GOAWAY
// with code, the last peer stream processed and debug (one phase, unlike
// GracefulShutdown). Streams already open go on and the connection closes
// when none is left. With a code other than NO_ERROR the connection is
// closed at once after the frame.
func (c *Conn) GoAway(code h2frame.ErrCode, debug string) { c.goAway(code, debug, InitiatorUser) }

// Close closes the connection at once: it sends GOAWAY(NO_ERROR) when it
// can without blocking, closes the socket, fails every open stream with an
// error matching ErrConnClosed, and releases every pooled buffer once the
// reader has stopped. It returns nil; calling it again does nothing.
func (c *Conn) Close() error { c.closeWith(errLocalClose); return nil }

// PeerGoAway returns the error code and debug data of the GOAWAY the peer
// sent, and false when it sent none or sent NO_ERROR.
func (c *Conn) PeerGoAway() (code h2frame.ErrCode, debug string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rare != nil {
		debug = c.rare.peerGoAwayDebug
	}
	return c.peerGoAwayCode, debug, c.goAwayRecv && c.peerGoAwayCode != h2frame.ErrCodeNo
}

// OnGoingAway arranges for f to run, on a goroutine of its own, once the
// connection accepts no new streams (when GoingAway closes); at once if it
// already does. It lets a client learn that a connection it keeps idle is
// lost without a goroutine waiting on GoingAway for each connection. A
// second call replaces the first's f if that has not run yet.
func (c *Conn) OnGoingAway(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.IsGoingAway() {
		go f()
		return
	}
	c.notifyLocked().onAway = f
}

// IsGoingAway reports whether GoingAway is closed, without a lock or a
// channel: a client checks it before every call.
func (c *Conn) IsGoingAway() bool { return c.state.Load()&stateAway != 0 }

// Ended reports whether Done is closed, without a lock or a channel.
func (c *Conn) Ended() bool { return c.state.Load()&stateEnded != 0 }

// Role returns the role the engine plays.
func (c *Conn) Role() Role { return c.role }

// LocalAddr returns the socket's local address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// RemoteAddr returns the socket's remote address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// StreamActivity reports the streams open on the connection and the id of
// the next stream this side would open: a client that sees both unchanged
// between two looks opened no stream in between, which tells it whether
// it has been idle without counting anything on the call path.
func (c *Conn) StreamActivity() (active int, nextID uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.numLocal + c.numPeer), c.nextID
}

// Stream methods. A Stream is used by at most one goroutine receiving
// (RecvHeaders, Recv, RecvInto) and one sending (Send) at a time; Reset,
// Done and ID may be called from any goroutine.

// ID returns the stream identifier.
func (s *Stream) ID() uint32 { return s.id }

// Conn returns the connection the stream belongs to.
func (s *Stream) Conn() *Conn { return s.conn }

// Initiator says who caused an error, which decides what goes on the wire.
type Initiator uint8

const (
	// InitiatorEngine: the local engine detected a protocol violation or
	// an I/O failure; it sends RST_STREAM or GOAWAY with the code.
	InitiatorEngine Initiator = iota + 1
	// InitiatorUser: the local user called Reset, GoAway or Close.
	InitiatorUser
	// InitiatorPeer: the peer sent RST_STREAM or GOAWAY, or closed the
	// socket; nothing is sent in reply.
	InitiatorPeer
)

func (i Initiator) String() string {
	switch i {
	case InitiatorEngine:
		return "engine"
	case InitiatorUser:
		return "user"
	case InitiatorPeer:
		return "peer"
	}
	return "initiator?"
}

// Error is an engine error: its HTTP/2 code, its scope (StreamID 0: the
// whole connection) and who initiated it. Connection-scope errors match
// net.ErrClosed with errors.Is.
type Error struct {
	Code      h2frame.ErrCode
	StreamID  uint32 // 0: connection error
	Initiator Initiator
	// Unprocessed is set when the peer is known not to have processed the
	// stream (REFUSED_STREAM, or above a GOAWAY's last stream id): the
	// request may be retried on another connection.
	Unprocessed bool
	Reason      string // fixed token or the peer's GOAWAY debug data
	Cause       error  // the I/O error behind a connection end, if any
}

func (e *Error) Error() string {
	scope := "connection"
	if e.StreamID != 0 {
		scope = fmt.Sprintf("stream %d", e.StreamID)
	}
	s := fmt.Sprintf("h2conn: %s error (%s): %v", scope, e.Initiator, e.Code)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the underlying I/O error, if any.
func (e *Error) Unwrap() error { return e.Cause }

// Is makes connection-scope errors match net.ErrClosed and ErrConnClosed.
func (e *Error) Is(target error) bool {
	if e.StreamID == 0 && (target == net.ErrClosed || target == ErrConnClosed) {
		return true
	}
	return false
}

var (
	// ErrConnClosed is returned by NewStream and stream methods once the
	// connection has ended. It matches net.ErrClosed.
	ErrConnClosed = fmt.Errorf("h2conn: connection closed: %w", net.ErrClosed)
	// ErrGoingAway is returned by NewStream after a GOAWAY was received or
	// sent: no stream was opened, the request may be retried elsewhere.
	ErrGoingAway = errors.New("h2conn: connection is going away")
	// ErrSendClosed is API misuse: writing after the sending side ended.
	ErrSendClosed = errors.New("h2conn: write on a stream whose sending side is closed")
	// ErrHeadersNotSent is API misuse: DATA before the HEADERS.
	ErrHeadersNotSent = errors.New("h2conn: DATA written before HEADERS")
	// ErrTrailersMustEnd is API misuse: HEADERS after the first must end
	// the stream.
	ErrTrailersMustEnd = errors.New("h2conn: trailers must end the stream")
	// ErrConcurrentWrite is API misuse: a write on a stream while another
	// goroutine's write on it has not returned (it waits for flow-control
	// window). The second write is refused whole, so the first one's
	// frames stay contiguous.
	ErrConcurrentWrite = errors.New("h2conn: write on a stream while another write on it is in progress")
	// ErrPseudoInTrailers is API misuse: trailers with a pseudo-header
	// field (RFC 9113 §8.1).
	ErrPseudoInTrailers = errors.New("h2conn: trailers with a pseudo-header field")
	// ErrNoStatus is API misuse: a response's first HEADERS without
	// :status (RFC 9113 §8.3.2).
	ErrNoStatus = errors.New("h2conn: response headers without :status")
	// ErrEmptyItem is API misuse: a SendItem without parts.
	ErrEmptyItem = errors.New("h2conn: send of an item without parts")
	// ErrWrongRole is API misuse: a client method on a server stream or
	// the reverse.
	ErrWrongRole = errors.New("h2conn: method not available in this role")
)
