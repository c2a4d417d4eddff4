package leangrpc

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
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
	creds                credentials.TransportCredentials
	unknownHandler       grpc.StreamHandler
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
// grpc-go does and plain HTTP/2 peers expect, and raises it to 256 KiB
// (grpcMaxFrameSize) once it carries a gRPC request. Larger frames cut the
// per-frame cost of big messages from leangrpc clients and let them land
// in the message's buffer straight from the socket (grpc-go clients send
// 16 KiB frames whatever we allow).
func MaxFrameSize(n uint32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxFrameSize = n })
}

// grpcMaxFrameSize is the SETTINGS_MAX_FRAME_SIZE a server connection
// raises to once it carries gRPC, and what a client announces by default.
const grpcMaxFrameSize = 256 << 10

// KeepaliveParams sets the server's connection management: idle and age
// limits and its own keepalive pings.
func KeepaliveParams(kp keepalive.ServerParameters) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.kp = kp })
}

// KeepaliveEnforcementPolicy sets how the server polices client pings.
func KeepaliveEnforcementPolicy(kep keepalive.EnforcementPolicy) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.kep = kep })
}

// ConnectionTimeout bounds the credentials handshake of a new connection
// (default 120s).
func ConnectionTimeout(d time.Duration) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.connTimeout = d })
}

// InitialWindowSize sets the stream receive window.
func InitialWindowSize(n int32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.initialWindow = n })
}

// InitialConnWindowSize sets the connection receive window.
func InitialConnWindowSize(n int32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.initialConnWindow = n })
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
	backoff           backoffConfig
	perRPC            []credentials.PerRPCCredentials
}

// WithPerRPCCredentials adds credentials whose metadata goes with every
// call (tokens and the like).
func WithPerRPCCredentials(c credentials.PerRPCCredentials) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.perRPC = append(o.perRPC, c) })
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

// WithInitialWindowSize sets the stream receive window.
func WithInitialWindowSize(n int32) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.initialWindow = n })
}

// WithInitialConnWindowSize sets the connection receive window.
func WithInitialConnWindowSize(n int32) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.initialConnWindow = n })
}

// WithMaxFrameSize sets the SETTINGS_MAX_FRAME_SIZE the client announces:
// the largest frame payload the server may send it, clamped to
// [16 KiB, 16 MiB-1] (default 256 KiB; grpc-go announces the RFC 9113
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
