package leangrpc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// Version is leangrpc's version, sent in the user-agent.
const Version = "0.1.0"

const userAgent = "leangrpc-go/" + Version + " grpc-go/" + grpc.Version

// backoffConfig follows gRPC's connection-backoff document.
type backoffConfig struct {
	base, max         time.Duration
	multiplier        float64
	jitter            float64
	minConnectTimeout time.Duration
}

var defaultBackoff = backoffConfig{
	base:              time.Second,
	max:               120 * time.Second,
	multiplier:        1.6,
	jitter:            0.2,
	minConnectTimeout: 20 * time.Second,
}

// delay returns the wait before reconnect attempt retries+1.
func (b backoffConfig) delay(retries int) time.Duration {
	if retries == 0 {
		return b.base
	}
	d, max := float64(b.base), float64(b.max)
	for d < max && retries > 0 {
		d *= b.multiplier
		retries--
	}
	d = min(d, max)
	d *= 1 + b.jitter*(rand.Float64()*2-1)
	return time.Duration(max0(d))
}

func max0(f float64) float64 {
	if f < 0 {
		return 0
	}
	return f
}

// ClientConn is a client channel to one target. It implements
// grpc.ClientConnInterface. It starts IDLE; the first call (or Connect)
// builds the target's resolver and the load-balancing policy the service
// config names (pick_first by default), both from grpc-go's registries,
// and every call takes the connection the policy's picker chooses.
type ClientConn struct {
	target string
	// defScheme is the scheme prefixed to target to parse it, "" when it
	// named its own (see parsedTarget).
	defScheme string
	builder   resolver.Builder
	authority string
	opts      channelOptions
	unaryInt  grpc.UnaryClientInterceptor
	streamInt grpc.StreamClientInterceptor
	// h2cfg is the configuration of new connections, shared by the
	// ClientConns of one configuration and read-only; a GOAWAY
	// too_many_pings replaces it with one that pings half as often. Its
	// Pool is the channel's buffer pool.
	h2cfg     atomic.Pointer[h2conn.Config]
	userAgent string
	// acceptEncoding is the grpc-accept-encoding of the calls: the
	// compressors registered in grpc-go's registry when the ClientConn was
	// made (they register at init), as grpc-go's transport computes it.
	acceptEncoding string
	stats          stats.Handler // nil without WithStatsHandler options
	// connEnds reports each connection's ConnEnd once (stats_client.go);
	// with a stats handler only, guarded by mu.
	connEnds map[*h2conn.Conn]*connEnd

	// pickers is the picker calls consult (picker.go); never nil after
	// NewClient.
	pickers atomic.Pointer[pickerGen]
	// sc is the service config in force, nil when there is none: then a
	// call costs nothing more than this load. defaultSC is
	// WithDefaultServiceConfig's, parsed for this ClientConn (its retry
	// throttle is the channel's own).
	sc        atomic.Pointer[serviceConfig]
	defaultSC *serviceConfig
	// ser runs the calls into the balancer one at a time (serializer.go).
	ser serializer

	// waitingPicks counts the calls waiting for a picker: they keep the
	// ClientConn out of IDLE.
	waitingPicks atomic.Int32
	// isClosed is closed, readable without mu.
	isClosed atomic.Bool
	// resolved is set by the resolver's first report: until then a call
	// waits on resolvedCh (made on demand), since its method config is
	// unknown.
	resolved atomic.Bool
	// unixScheme marks grpc-go's unix and unix-abstract resolvers, whose
	// addresses are socket paths. grpc-go marks such addresses with an
	// attribute under an internal key; leangrpc knows them by the
	// resolver that made them.
	unixScheme bool
	// aliasBytes is WithAliasBytes, or its default (aliasBytes).
	aliasBytes bool
	// https says the calls' :scheme is https (TLS credentials).
	https bool
	// idleIdx is the position of the ClientConn's idle check in the
	// process-wide heap, plus one; 0 when not there (idlecheck.go).
	// Guarded by idleChecks.mu.
	idleIdx int32

	mu     sync.Mutex // guards the fields below
	closed bool
	// idle: no resolver and no balancer exist; res and bw are nil.
	idle bool
	// resolverConfig is set once the resolver gave a valid service
	// config: a later invalid one keeps the config in force.
	resolverConfig bool
	// idleChecking is set while the ClientConn is out of IDLE and
	// WithIdleTimeout is on: an idle check, scheduled every idle timeout,
	// looks for calls (idlecheck.go).
	idleChecking bool
	res          *resolverConn
	bw           *balancerWrapper // nil until the resolver's first report
	// state is the connectivity state: the balancer's, or IDLE, or
	// SHUTDOWN; stateCh, made by a WaitForStateChange, closes when it
	// changes.
	state      connectivity.State
	stateCh    chan struct{}
	resolvedCh chan struct{}
	old        []*h2conn.Conn // connections that finish their calls and close
	// idleTimer schedules the idle checks of a ClientConn that left IDLE
	// inside a testing/synctest bubble; nil otherwise (idlecheck.go).
	idleTimer *time.Timer
}

// defaultClientMaxFrameSize is the SETTINGS_MAX_FRAME_SIZE a client
// announces unless WithMaxFrameSize says otherwise. It lets a server send a
// large response in a few large DATA frames instead of 16 KiB ones: each
// frame costs the receiver a parse and a wake-up, and most of a large
// frame's bytes land in the message's buffer straight from the socket
// (PERFORMANCE.md, "Client max frame size"). 1 MiB rather than 256 KiB:
// each frame costs about two reads and one writev between leangrpc peers,
// so a 1 MB message took four of each (PERFORMANCE.md, "System calls per
// megabyte"). grpc-go servers send 16 KiB frames whatever we allow. The
// server keeps the RFC default, which peers and h2spec assume.
const defaultClientMaxFrameSize = 1 << 20

// NewClient returns a ClientConn for target, parsed as grpc-go's NewClient
// parses it: "host:port" (resolved by dns), "dns:[//authority/]host:port",
// "passthrough:///address", "unix:path", "unix:///abs/path",
// "unix-abstract:name" or any scheme of a resolver registered with
// grpc-go's resolver.Register or given with WithResolvers. It resolves
// and connects lazily, on the first call or Connect: the ClientConn starts
// IDLE, as grpc-go's does (see GetState).
func NewClient(target string, opts ...DialOption) (*ClientConn, error) {
	return newClient(target, "", opts)
}

// newClient is NewClient, reading a target without a known scheme with
// scheme when it is not "" (Dial's "passthrough").
func newClient(target, scheme string, opts []DialOption) (*ClientConn, error) {
	o := dialOptions{
		backoff:         defaultBackoff,
		maxFrameSize:    defaultClientMaxFrameSize,
		idleTimeout:     defaultIdleTimeout,
		maxCallAttempts: defaultMaxCallAttempts,
	}
	for _, opt := range opts {
		opt.applyDial(&o)
	}
	var bundlePerRPC credentials.PerRPCCredentials
	if b := o.bundle; b != nil {
		if o.creds != nil {
			return nil, errors.New("grpc: credentials.Bundle may not be used with individual TransportCredentials")
		}
		if o.creds = b.TransportCredentials(); o.creds == nil {
			return nil, errors.New("grpc: credentials.Bundle must return non-nil transport credentials")
		}
		bundlePerRPC = b.PerRPCCredentials()
	}
	if o.creds == nil {
		// grpc-go refuses a client without credentials; leangrpc speaks
		// plaintext then, which is what every caller so far wants.
		o.creds = insecure.NewCredentials()
	}
	for _, c := range o.perRPC {
		if c.RequireTransportSecurity() && o.creds.Info().SecurityProtocol == "insecure" {
			return nil, errors.New("grpc: the credentials require transport level security (use grpc.WithTransportCredentials() to set)")
		}
	}
	if bundlePerRPC != nil {
		// After the check above, as in grpc-go, which adds a bundle's
		// per-RPC credentials to the connection's in its transport.
		o.perRPC = append(o.perRPC[:len(o.perRPC):len(o.perRPC)], bundlePerRPC)
	}
	parsed, builder, defScheme, err := parseTarget(target, scheme, o.resolvers)
	if err != nil {
		return nil, err
	}
	cc := &ClientConn{target: target, defScheme: defScheme, builder: builder, opts: o.forChannel()}
	// After the target and the credentials, before the authority, as
	// grpc-go checks them.
	if js := o.defaultServiceConfig; js != nil {
		sc, err := parseServiceConfig(*js, o.maxCallAttempts)
		if err != nil {
			return nil, fmt.Errorf("grpc: the provided default service config is invalid: %v", err)
		}
		cc.defaultSC = sc
		cc.sc.Store(sc)
	}
	cc.idle = true
	cc.state = connectivity.Idle
	cc.publishPickerLocked(idlePickers)
	if s := parsed.URL.Scheme; (s == "unix" || s == "unix-abstract") && builder == resolver.Get(s) {
		cc.unixScheme = true
	}
	cc.authority = targetAuthority(parsed, builder)
	// Credentials that name the server (TLS with a ServerName) and an
	// authority option that names another would verify one name and
	// send the other; grpc-go refuses the pair, in these words.
	if sn := o.creds.Info().ServerName; sn != "" && o.authority != "" && sn != o.authority {
		return nil, fmt.Errorf("ClientConn's authority from transport creds %q and dial option %q don't match", sn, o.authority)
	}
	if o.authority != "" {
		cc.authority = o.authority
	} else if sn := o.creds.Info().ServerName; sn != "" {
		cc.authority = sn
	}
	// Only TLS makes the scheme https, as in grpc-go: local credentials
	// over loopback TCP protect nothing, and over a Unix socket what
	// they vouch for is the channel, not an HTTPS origin.
	cc.https = o.creds.Info().SecurityProtocol == "tls"
	cc.userAgent = userAgent
	cc.acceptEncoding = grpcwire.RegisteredCompressors()
	if o.userAgent != "" {
		cc.userAgent = o.userAgent + " " + userAgent
	}
	cc.unaryInt = chainUnaryClient(o.unaryInts)
	cc.streamInt = chainStreamClient(o.streamInts)
	cc.stats = combineStats(o.statsHandlers)
	cc.aliasBytes = aliasBytes(o.aliasBytes)
	pool := bufpool.Default()
	if o.bufferPool != nil {
		pool = bufpool.New(o.bufferPool)
	}
	cc.h2cfg.Store(h2conn.SharedConfig(h2conn.Config{
		InitialStreamWindow:          windowSize(o.initialWindow),
		MaxFrameSize:                 o.maxFrameSize,
		InitialConnWindow:            windowSize(o.initialConnWindow),
		DisableBDP:                   o.staticWindows,
		MaxHeaderListSize:            o.maxHeaderListSize,
		Pool:                         pool,
		PooledReads:                  pooledReads(o.readBufferPooling),
		RecvLowWater:                 recvLowWater(o.recvLowWater),
		KeepaliveTime:                o.kp.Time,
		KeepaliveTimeout:             o.kp.Timeout,
		KeepalivePermitWithoutStream: o.kp.PermitWithoutStream,
	}))
	return cc, nil
}

// scheme is the calls' :scheme.
func (cc *ClientConn) scheme() string {
	if cc.https {
		return "https"
	}
	return "http"
}

// Target returns the target the ClientConn was created with.
func (cc *ClientConn) Target() string { return cc.target }

var errConnClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

// readyConn is a connection with its peer, published for the lock-free
// path of a call.
type readyConn struct {
	conn *h2conn.Conn
	peer *peer.Peer
}

// Close shuts the channel down: the resolver and the balancer stop, every
// connection closes, and RPCs in flight fail with Canceled or Unavailable.
func (cc *ClientConn) Close() error {
	cc.mu.Lock()
	if cc.closed {
		cc.mu.Unlock()
		return nil
	}
	cc.closed = true
	cc.isClosed.Store(true)
	cc.publishPickerLocked(closedPickers)
	cc.setStateLocked(connectivity.Shutdown)
	cc.markResolvedLocked() // wakes the calls waiting for it: they see closed
	cc.cancelIdleCheckLocked()
	rc, bw := cc.res, cc.bw
	cc.res, cc.bw = nil, nil
	cc.mu.Unlock()
	if rc != nil {
		rc.close()
	}
	if bw != nil {
		cc.ser.run(bw.close)
	}
	cc.ser.close()
	// The balancer's close shut its SubConns down, which moved their
	// connections to old.
	cc.mu.Lock()
	conns := cc.old
	cc.old = nil
	cc.mu.Unlock()
	for _, c := range conns {
		c.Close()
		<-c.Done()
		cc.endConnStats(c) // before Close returns, as grpc-go's transports report it
	}
	return nil
}

func pooledReads(opt *bool) bool {
	if opt != nil {
		return *opt
	}
	return sockio.PooledReadsDefault()
}

func aliasBytes(opt *bool) bool {
	if opt != nil {
		return *opt
	}
	return grpcwire.AliasBytesDefault()
}

func recvLowWater(opt *bool) bool {
	if opt != nil {
		return *opt
	}
	return sockio.LowWaterDefault()
}

// pruneDone drops the connections that have ended.
func pruneDone(cs []*h2conn.Conn) []*h2conn.Conn {
	out := cs[:0]
	for _, c := range cs {
		if !c.Ended() {
			out = append(out, c)
		}
	}
	return out
}
