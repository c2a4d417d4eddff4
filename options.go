package leangrpc

import (
	"context"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/tap"
)

// ServerOption configures a Server.
type ServerOption interface{ applyServer(*serverOptions) }

type serverOptionFunc func(*serverOptions)

func (f serverOptionFunc) applyServer(o *serverOptions) { f(o) }

type serverOptions struct {
	unaryInts            []grpc.UnaryServerInterceptor
	streamInts           []grpc.StreamServerInterceptor
	maxRecv              int
	maxSend              int
	maxConcurrentStreams uint32
	maxFrameSize         uint32
	kp                   keepalive.ServerParameters
	kep                  keepalive.EnforcementPolicy
	connTimeout          time.Duration
	initialWindow        int32
	initialConnWindow    int32
	bufferPool           mem.BufferPool
	readBufferPooling    *bool
	recvLowWater         *bool
	aliasBytes           *bool
	creds                credentials.TransportCredentials
	unknownHandler       grpc.StreamHandler
	codec                encoding.CodecV2
	maxHeaderListSize    uint32
	headerTableSize      uint32
	staticWindows        bool
	waitForHandlers      bool
	inTap                tap.ServerInHandle
	statsHandlers        []stats.Handler
	numStreamWorkers     uint32
	memoryBudget         int64
	offenderBackoff      *time.Duration
	noWebProtocols       bool
	webProtocols         bool // !noWebProtocols, set by NewServer
	httpHandler          http.Handler
	corsOrigins          []string
}

// WebProtocols turns the web protocols on or off: gRPC-Web and the Connect
// protocol, for the same services as gRPC, on the server's own listener
// (HTTP/2, and HTTP/1.1 connections it hands to net/http) and through
// ServeHTTP. They are on by default. They widen nothing a service
// exposes: every call of every protocol runs the same interceptors,
// credentials and limits, and a browser page of another origin can read
// no answer unless CORSOrigins allows its origin. Off, a web request is
// refused as grpc-go refuses it (HTTP 415) and HTTP/1.1 connections are
// closed.
func WebProtocols(on bool) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.noWebProtocols = !on })
}

// HTTPHandler routes every request that is not a call of a registered
// service (no gRPC, gRPC-Web or Connect content-type, or a path naming no
// registered method) to h, on the server's own listener and through
// ServeHTTP: health pages, metrics, REST, the page of a web app, on the
// port that serves its calls. On the own listener h sees HTTP/2 requests
// on the engine and HTTP/1.1 ones through net/http.
func HTTPHandler(h http.Handler) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.httpHandler = h })
}

// CORSOrigins lets pages of these origins ("https://app.example.com", or
// "*" for any) call the server from a browser: preflight requests are
// answered, and responses carry the fields a browser needs to let the page
// read them, the gRPC and Connect status fields and metadata exposed.
// None by default: a browser then lets only pages of the server's own
// origin read its answers.
func CORSOrigins(origins ...string) ServerOption {
	return serverOptionFunc(func(o *serverOptions) {
		o.corsOrigins = append(o.corsOrigins[:len(o.corsOrigins):len(o.corsOrigins)], origins...)
	})
}

// OffenderBackoff bounds how fast the server takes new connections from an
// address whose connections it ended for abuse (GOAWAY ENHANCE_YOUR_CALM:
// reset and control-frame floods, HPACK bombs, header blocks past the
// memory budget, a stall inside a frame). After an offense the address is
// served one new connection per interval, starting at a millisecond and
// doubling with each offense up to max; the others are closed as they are
// accepted. Connections already up are never affected, and an address is
// forgotten 30 s after its last offense. The default max is one second;
// 0 turns the throttle off (as grpc-go, which has no such option, does
// not throttle), for a server whose clients all come through one trusted
// proxy address. IPv6 addresses are counted by their /64.
func OffenderBackoff(max time.Duration) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.offenderBackoff = &max })
}

// MemoryBudget gives the server a memory budget of its own, of n bytes
// (at least 1 MiB): one account of what its connections hold on behalf of
// peers (header blocks, header lists of open streams, DATA handlers have
// not read, control frames queued for peers that do not read, connections
// in their handshake). From three quarters of it the server refuses new
// streams on the connections holding more than their share
// (REFUSED_STREAM) and closes new connections before their handshake; at
// the budget it ends the connections holding the most with GOAWAY
// ENHANCE_YOUR_CALM until the rest fits. Without the option every server
// of the process shares one budget of 1 GiB, or a quarter of GOMEMLIMIT
// when that is lower. grpc-go has no such option (gRPC C-core's resource
// quota is the idea); see OPTIONS.md.
func MemoryBudget(n int64) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.memoryBudget = n })
}

// NumStreamWorkers bounds the goroutines the server keeps to run handlers
// on (workers.go); 0, the default, bounds them by 64 per GOMAXPROCS, at
// least 128. grpc-go starts that many workers with Serve and keeps them,
// and without the option starts a goroutine per stream. leangrpc always
// reuses handler goroutines, starts them as calls come and lets them exit
// after a second without a call, so an idle server holds none. As in
// grpc-go, a call that finds every worker busy runs on a goroutine of its
// own; a lone unary call on a connection runs on the connection's reader.
func NumStreamWorkers(n uint32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.numStreamWorkers = n })
}

// UnknownServiceHandler sets a handler for calls to services and methods
// that are not registered (a proxy, say), run as a bidi stream through the
// stream interceptors, as in grpc-go.
func UnknownServiceHandler(h grpc.StreamHandler) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.unknownHandler = h })
}

// UnaryInterceptor sets the server's unary interceptor; it runs before
// those added by ChainUnaryInterceptor, as in grpc-go.
func UnaryInterceptor(i grpc.UnaryServerInterceptor) ServerOption {
	return serverOptionFunc(func(o *serverOptions) {
		o.unaryInts = append([]grpc.UnaryServerInterceptor{i}, o.unaryInts...)
	})
}

// ChainUnaryInterceptor adds unary interceptors, run in the order given.
func ChainUnaryInterceptor(is ...grpc.UnaryServerInterceptor) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.unaryInts = append(o.unaryInts, is...) })
}

// StreamInterceptor sets the server's stream interceptor; it runs before
// those added by ChainStreamInterceptor.
func StreamInterceptor(i grpc.StreamServerInterceptor) ServerOption {
	return serverOptionFunc(func(o *serverOptions) {
		o.streamInts = append([]grpc.StreamServerInterceptor{i}, o.streamInts...)
	})
}

// ChainStreamInterceptor adds stream interceptors, run in the order given.
func ChainStreamInterceptor(is ...grpc.StreamServerInterceptor) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.streamInts = append(o.streamInts, is...) })
}

// MaxMsgSize is MaxRecvMsgSize under its old name.
//
// Deprecated: use MaxRecvMsgSize, as with grpc-go.
func MaxMsgSize(n int) ServerOption { return MaxRecvMsgSize(n) }

// MaxRecvMsgSize sets the largest message the server receives (default 4 MiB).
func MaxRecvMsgSize(n int) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxRecv = n })
}

// MaxSendMsgSize sets the largest message the server sends (default
// unlimited).
func MaxSendMsgSize(n int) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxSend = n })
}

// MaxConcurrentStreams limits the streams each client may open at once.
func MaxConcurrentStreams(n uint32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxConcurrentStreams = n })
}

// MaxFrameSize sets the SETTINGS_MAX_FRAME_SIZE the server announces: the
// largest frame payload clients may send it, clamped to [16 KiB, 16 MiB-1].
// Without it a connection announces the RFC 9113 default of 16 KiB, as
// grpc-go does and plain HTTP/2 peers expect, and raises it to 1 MiB
// (grpcMaxFrameSize) once it carries a gRPC request. Larger frames cut the
// per-frame cost of big messages from leangrpc clients and let them land
// in the message's buffer straight from the socket (grpc-go clients send
// 16 KiB frames whatever we allow).
func MaxFrameSize(n uint32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxFrameSize = n })
}

// grpcMaxFrameSize is the SETTINGS_MAX_FRAME_SIZE a server connection
// raises to once it carries gRPC, and what a client announces by default
// (see defaultClientMaxFrameSize).
const grpcMaxFrameSize = 1 << 20

// KeepaliveParams sets the server's connection management: idle and age
// limits and its own keepalive pings. A Time under 1 s is raised to 1 s
// with a warning logged through grpclog, as grpc-go does.
func KeepaliveParams(kp keepalive.ServerParameters) ServerOption {
	const minTime = time.Second // grpc-go's floor for a server's pings
	if kp.Time > 0 && kp.Time < minTime {
		logger.Warningf("Adjusting keepalive ping interval to minimum period of %v", minTime)
		kp.Time = minTime
	}
	return keepaliveParams(kp)
}

// keepaliveParams is KeepaliveParams without the floor.
func keepaliveParams(kp keepalive.ServerParameters) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.kp = kp })
}

// KeepaliveEnforcementPolicy sets how the server polices client pings.
func KeepaliveEnforcementPolicy(kep keepalive.EnforcementPolicy) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.kep = kep })
}

// ConnectionTimeout bounds the credentials handshake of a new connection,
// and then the wait for the client's preface and first SETTINGS, as in
// grpc-go (default 10 s; grpc-go's is 120 s, which lets stalled
// connections stay two minutes each).
func ConnectionTimeout(d time.Duration) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.connTimeout = d })
}

// InitialWindowSize sets the stream receive window; values under 64 KiB
// are ignored. As in grpc-go, setting a window makes the windows static:
// they no longer grow from the measured bandwidth-delay product. Without
// it a stream's window starts at 1 MiB (grpc-go's at 64 KiB) and may grow.
func InitialWindowSize(n int32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.initialWindow, o.staticWindows = n, true })
}

// InitialConnWindowSize sets the connection receive window; values under
// 64 KiB are ignored. It makes the windows static, as InitialWindowSize
// does. Without it the connection's window starts at 16 MiB.
func InitialConnWindowSize(n int32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.initialConnWindow, o.staticWindows = n, true })
}

// windowSize is the engine's value for a window option: grpc-go ignores
// windows under the RFC's 64 KiB, and 0 is the engine's default.
func windowSize(n int32) uint32 {
	if n < 1<<16 {
		return 0
	}
	return uint32(n)
}

// StaticStreamWindowSize sets the stream receive window and turns off its
// growth from the measured bandwidth-delay product; values under 64 KiB
// are ignored. The connection's window keeps leangrpc's default (16 MiB)
// unless StaticConnWindowSize sets it; grpc-go falls back to 64 KiB.
func StaticStreamWindowSize(n int32) ServerOption { return InitialWindowSize(n) }

// StaticConnWindowSize sets the connection receive window and turns off
// window growth, as StaticStreamWindowSize does for streams.
func StaticConnWindowSize(n int32) ServerOption { return InitialConnWindowSize(n) }

// MaxHeaderListSize sets the SETTINGS_MAX_HEADER_LIST_SIZE the server
// announces and enforces: the largest uncompressed header list (HPACK's
// count: names, values and 32 bytes per field) a request's HEADERS may
// carry. A request over it is reset before it reaches a handler, its
// header block decoded no further than the limit. 0 keeps the default,
// 1 MiB (grpc-go's is 16 MiB: a server takes lists from any peer, and
// h2conn.DefaultServerMaxHeaderListSize says why it is lower).
func MaxHeaderListSize(n uint32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxHeaderListSize = n })
}

// HeaderTableSize sets the SETTINGS_HEADER_TABLE_SIZE the server announces:
// the size of the HPACK dynamic table its decoder keeps for a
// connection's requests (default 4096; 0 keeps it).
func HeaderTableSize(n uint32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.headerTableSize = n })
}

// ForceServerCodec makes the server encode and decode every call's
// messages with codec, an old-style encoding.Codec, whatever the
// request's content-subtype; the response's content-type still echoes the
// request's, as in grpc-go. Without it the server picks the codec
// registered for the request's content-subtype (encoding.RegisterCodec
// or RegisterCodecV2), proto when there is none.
func ForceServerCodec(codec encoding.Codec) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.codec = grpcwire.V1Codec(codec) })
}

// ForceServerCodecV2 is ForceServerCodec for an encoding.CodecV2.
func ForceServerCodecV2(codec encoding.CodecV2) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.codec = codec })
}

// CustomCodec is ForceServerCodec for grpc-go's deprecated grpc.Codec.
//
// Deprecated: use ForceServerCodec or ForceServerCodecV2, as with grpc-go.
func CustomCodec(codec grpc.Codec) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.codec = grpcwire.BytesCodec(codec, codec.String()) })
}

// InTapHandle sets a function run for each new call before anything else
// is done for it, on the connection's reader as in grpc-go (so it must be
// quick): it gets the method and the request's metadata, its context
// becomes the parent of the call's, and an error answers the call with
// the error's status (PermissionDenied for an error that is not a status)
// without running interceptors or handler. Only one may be set.
func InTapHandle(h tap.ServerInHandle) ServerOption {
	return serverOptionFunc(func(o *serverOptions) {
		if o.inTap != nil {
			panic("The tap handle was already set and may not be reset.")
		}
		o.inTap = h
	})
}

// WaitForHandlers makes Stop wait until every method handler has
// returned, as GracefulStop does. By default Stop returns once the
// connections are closed, handlers possibly still running, as in grpc-go.
func WaitForHandlers(w bool) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.waitForHandlers = w })
}

// BufferPool makes the server take read and write buffers from p.
func BufferPool(p mem.BufferPool) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.bufferPool = p })
}

// ReadBufferPooling turns pooled reads on or off (default: on unless
// LEANGRPC_READ_BUFFER_POOLING=false).
func ReadBufferPooling(on bool) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.readBufferPooling = &on })
}

// RecvLowWater turns the receive low-water mark on or off (default: on
// unless LEANGRPC_RCVLOWAT=0): on Linux, with pooled reads, the reader waits
// for the rest of a large DATA frame under SO_RCVLOWAT, so that the kernel
// wakes it once for the whole frame rather than for each part. Elsewhere it
// has no effect.
func RecvLowWater(on bool) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.recvLowWater = &on })
}

// AliasBytes turns aliasing receive on or off (default: on unless
// LEANGRPC_ALIAS_BYTES=false). With it, a received message decoded by
// grpc-go's proto codec keeps its bytes fields of 16 KiB and more in the
// buffer the message arrived in, instead of protobuf-go copying them out:
// the buffer is then the message's alone and is never reused, so such a
// field stays valid, and unchanged, for as long as the application
// references it (or the message). A message type generated by vtprotobuf
// with UnmarshalVTUnsafe is decoded with it, on the same terms. The
// fields' capacity is their length: an append copies. Codecs other than
// grpc-go's proto codec are not affected.
func AliasBytes(on bool) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.aliasBytes = &on })
}

// Creds sets the credentials every accepted connection goes through
// (default: none, plaintext).
func Creds(c credentials.TransportCredentials) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.creds = c })
}

// DialOption configures a ClientConn.
type DialOption interface{ applyDial(*dialOptions) }

type dialOptionFunc func(*dialOptions)

func (f dialOptionFunc) applyDial(o *dialOptions) { f(o) }

type dialOptions struct {
	creds             credentials.TransportCredentials
	resolvers         []resolver.Builder // WithResolvers, ahead of grpc-go's registry
	unaryInts         []grpc.UnaryClientInterceptor
	streamInts        []grpc.StreamClientInterceptor
	callOpts          []grpc.CallOption
	kp                keepalive.ClientParameters
	initialWindow     int32
	initialConnWindow int32
	maxFrameSize      uint32
	userAgent         string
	authority         string
	dialer            func(context.Context, string) (net.Conn, error)
	bufferPool        mem.BufferPool
	readBufferPooling *bool
	recvLowWater      *bool
	aliasBytes        *bool
	backoff           backoffConfig
	idleTimeout       time.Duration // WithIdleTimeout; 0 disables
	perRPC            []credentials.PerRPCCredentials
	maxHeaderListSize uint32
	staticWindows     bool
	bundle            credentials.Bundle
	statsHandlers     []stats.Handler
	// Service config (options_serviceconfig.go).
	defaultServiceConfig *string // WithDefaultServiceConfig's JSON
	disableServiceConfig bool
	disableRetry         bool
	maxCallAttempts      int
	disableHealthCheck   bool
	// dial holds what only Dial and DialContext use (dial.go): nil
	// unless one of their options was given, so that a ClientConn made
	// by NewClient carries one pointer for them.
	dial *dialWait
}

// channelOptions are what a ClientConn consults of its dial options after
// NewClient. The rest of dialOptions (interceptors, windows, pools, the
// resolvers, the default service config) is spent building the ClientConn
// and its connections' configuration, and every idle channel would carry
// it for nothing.
type channelOptions struct {
	creds    credentials.TransportCredentials
	bundle   credentials.Bundle
	dialer   func(context.Context, string) (net.Conn, error)
	callOpts []grpc.CallOption
	perRPC   []credentials.PerRPCCredentials
	// backoff is &defaultBackoff unless an option changed it, so that
	// channels with the default share it.
	backoff     *backoffConfig
	idleTimeout time.Duration // WithIdleTimeout; 0 disables
	// keepaliveTime is WithKeepaliveParams' Time as given, which a GOAWAY
	// too_many_pings doubles (pingedTooOften).
	keepaliveTime   time.Duration
	dial            *dialWait // as in dialOptions
	maxCallAttempts int32
	// authoritySet says WithAuthority named the authority: it then wins
	// over an address's ServerName.
	authoritySet         bool
	disableServiceConfig bool
	disableRetry         bool
	disableHealthCheck   bool
}

// forChannel returns what a ClientConn keeps of o.
func (o *dialOptions) forChannel() channelOptions {
	backoff := &defaultBackoff
	if o.backoff != defaultBackoff {
		b := o.backoff
		backoff = &b
	}
	return channelOptions{
		creds:                o.creds,
		bundle:               o.bundle,
		dialer:               o.dialer,
		callOpts:             o.callOpts,
		perRPC:               o.perRPC,
		backoff:              backoff,
		idleTimeout:          o.idleTimeout,
		keepaliveTime:        o.kp.Time,
		dial:                 o.dial,
		maxCallAttempts:      int32(min(o.maxCallAttempts, math.MaxInt32)),
		authoritySet:         o.authority != "",
		disableServiceConfig: o.disableServiceConfig,
		disableRetry:         o.disableRetry,
		disableHealthCheck:   o.disableHealthCheck,
	}
}

// WithPerRPCCredentials adds credentials whose metadata goes with every
// call (tokens and the like).
func WithPerRPCCredentials(c credentials.PerRPCCredentials) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.perRPC = append(o.perRPC, c) })
}

// WithCredentialsBundle sets the connection's credentials from a bundle:
// its transport credentials, and its per-RPC credentials (if any) after
// those of WithPerRPCCredentials. As in grpc-go, NewClient refuses a
// bundle together with WithTransportCredentials, or one without transport
// credentials. Modes (Bundle.NewWithMode) are not used: leangrpc talks to
// no load balancer.
func WithCredentialsBundle(b credentials.Bundle) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.bundle = b })
}

// WithTransportCredentials sets the connection's credentials;
// insecure.NewCredentials() gives plaintext.
func WithTransportCredentials(c credentials.TransportCredentials) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.creds = c })
}

// WithUnaryInterceptor sets the unary client interceptor; it runs before
// those added by WithChainUnaryInterceptor.
func WithUnaryInterceptor(i grpc.UnaryClientInterceptor) DialOption {
	return dialOptionFunc(func(o *dialOptions) {
		o.unaryInts = append([]grpc.UnaryClientInterceptor{i}, o.unaryInts...)
	})
}

// WithChainUnaryInterceptor adds unary client interceptors, run in order.
func WithChainUnaryInterceptor(is ...grpc.UnaryClientInterceptor) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.unaryInts = append(o.unaryInts, is...) })
}

// WithStreamInterceptor sets the stream client interceptor; it runs before
// those added by WithChainStreamInterceptor.
func WithStreamInterceptor(i grpc.StreamClientInterceptor) DialOption {
	return dialOptionFunc(func(o *dialOptions) {
		o.streamInts = append([]grpc.StreamClientInterceptor{i}, o.streamInts...)
	})
}

// WithChainStreamInterceptor adds stream client interceptors, run in order.
func WithChainStreamInterceptor(is ...grpc.StreamClientInterceptor) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.streamInts = append(o.streamInts, is...) })
}

// WithDefaultCallOptions sets call options applied before each call's own.
func WithDefaultCallOptions(cos ...grpc.CallOption) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.callOpts = append(o.callOpts, cos...) })
}

// WithKeepaliveParams sets the client's keepalive pings. A Time under
// 10 s (zero included) is raised to 10 s with a warning logged through
// grpclog, as grpc-go does: servers police frequent pings (grpc-go's
// default policy answers pings closer than 5 minutes apart, from the
// third, with GOAWAY too_many_pings), and a client pinging faster than any
// server allows would lose its connections.
func WithKeepaliveParams(kp keepalive.ClientParameters) DialOption {
	const minTime = 10 * time.Second // grpc-go's
	if kp.Time < minTime {
		logger.Warningf("Adjusting keepalive ping interval to minimum period of %v", minTime)
		kp.Time = minTime
	}
	return dialOptionFunc(func(o *dialOptions) { o.kp = kp })
}

// WithInitialWindowSize sets the stream receive window; values under
// 64 KiB are ignored. As in grpc-go, setting a window makes the windows
// static: they no longer grow from the measured bandwidth-delay product.
// Without it a stream's window starts at 1 MiB (grpc-go's at 64 KiB) and
// may grow.
func WithInitialWindowSize(n int32) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.initialWindow, o.staticWindows = n, true })
}

// WithInitialConnWindowSize sets the connection receive window; values
// under 64 KiB are ignored. It makes the windows static, as
// WithInitialWindowSize does. Without it the connection's window starts at
// 16 MiB.
func WithInitialConnWindowSize(n int32) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.initialConnWindow, o.staticWindows = n, true })
}

// WithStaticStreamWindowSize sets the stream receive window and turns off
// its growth from the measured bandwidth-delay product; values under
// 64 KiB are ignored. The connection's window keeps leangrpc's default
// (16 MiB) unless WithStaticConnWindowSize sets it; grpc-go falls back to
// 64 KiB.
func WithStaticStreamWindowSize(n int32) DialOption { return WithInitialWindowSize(n) }

// WithStaticConnWindowSize sets the connection receive window and turns
// off window growth, as WithStaticStreamWindowSize does for streams.
func WithStaticConnWindowSize(n int32) DialOption { return WithInitialConnWindowSize(n) }

// WithMaxHeaderListSize sets the SETTINGS_MAX_HEADER_LIST_SIZE the client
// announces and enforces: the largest uncompressed header list (HPACK's
// count: names, values and 32 bytes per field) the server's response
// headers or trailers may carry. A response over it fails the call with
// Internal, its header block decoded no further than the limit. 0 keeps
// the default, grpc-go's 16 MiB.
func WithMaxHeaderListSize(n uint32) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.maxHeaderListSize = n })
}

// WithMaxMsgSize sets the largest response message, as the default call
// option grpc.MaxCallRecvMsgSize does.
//
// Deprecated: use WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(n)), as
// with grpc-go.
func WithMaxMsgSize(n int) DialOption {
	return WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(n))
}

// WithCodec makes every call use grpc-go's deprecated grpc.Codec, as the
// default call option grpc.CallCustomCodec does.
//
// Deprecated: use WithDefaultCallOptions(grpc.ForceCodec(c)), as with
// grpc-go.
func WithCodec(c grpc.Codec) DialOption {
	return WithDefaultCallOptions(grpc.CallCustomCodec(c))
}

// WithMaxFrameSize sets the SETTINGS_MAX_FRAME_SIZE the client announces:
// the largest frame payload the server may send it, clamped to
// [16 KiB, 16 MiB-1] (default 1 MiB; grpc-go announces the RFC 9113
// default of 16 KiB).
func WithMaxFrameSize(n uint32) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.maxFrameSize = n })
}

// WithUserAgent puts s before leangrpc's own user-agent.
func WithUserAgent(s string) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.userAgent = s })
}

// WithAuthority sets the :authority of every call.
func WithAuthority(a string) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.authority = a })
}

// WithContextDialer sets the function that opens the network connection.
func WithContextDialer(f func(context.Context, string) (net.Conn, error)) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.dialer = f })
}

// WithBufferPool makes the client take read and write buffers from p.
func WithBufferPool(p mem.BufferPool) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.bufferPool = p })
}

// WithReadBufferPooling turns pooled reads on or off.
func WithReadBufferPooling(on bool) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.readBufferPooling = &on })
}

// WithAliasBytes turns aliasing receive on or off; see AliasBytes.
func WithAliasBytes(on bool) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.aliasBytes = &on })
}

// WithRecvLowWater turns the receive low-water mark on or off; see
// RecvLowWater.
func WithRecvLowWater(on bool) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.recvLowWater = &on })
}
