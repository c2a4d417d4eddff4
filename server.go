package leangrpc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leangrpc/leangrpc/internal/budget"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"github.com/leangrpc/leangrpc/internal/webwire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// ErrServerStopped is returned by Serve after Stop or GracefulStop. It is
// grpc-go's own value, so that code converted from grpc-go which compares
// Serve's error with grpc.ErrServerStopped (or errors.Is) keeps working.
var ErrServerStopped = grpc.ErrServerStopped

// Server is a gRPC server. It implements grpc.ServiceRegistrar.
type Server struct {
	opts     serverOptions
	unaryInt grpc.UnaryServerInterceptor
	strInt   grpc.StreamServerInterceptor
	stats    stats.Handler // nil without StatsHandler options
	wireCfg  grpcwire.ServerConfig
	h2cfg    h2conn.Config
	// raiseFrame is the SETTINGS_MAX_FRAME_SIZE a connection announces
	// once it carried a gRPC request, when no MaxFrameSize option set one
	// from the start; 0: none.
	raiseFrame uint32

	mu       sync.Mutex // guards the fields below
	services map[string]*serviceInfo
	serving  bool
	stopped  bool
	lis      map[net.Listener]struct{}
	conns    map[*h2conn.Conn]struct{}
	pending  map[*pendingHandshake]struct{} // handshakes waiting for their first bytes (handshake.go)
	connWG   sync.WaitGroup                 // serving goroutines of accepted connections
	handlers sync.WaitGroup                 // RPC handler goroutines
	workers  *workerPool                    // the goroutines that run handlers (workers.go)

	// The web protocols (web.go): the CORS policy (nil: none), whether
	// ServeHTTP has marked the server serving, and which methods a
	// Connect GET may call.
	cors        *webwire.CORS
	httpServing atomic.Bool
	getMethods  sync.Map // full method name → bool

	h1        http1Server      // the net/http server HTTP/1.1 connections go to (http1.go)
	offenders offenders        // addresses whose connections were ended for abuse (offenders.go)
	mdCache   grpcwire.MDCache // the incoming metadata maps calls share (rpc.Value)
}

type serviceInfo struct {
	impl     any
	methods  map[string]*grpc.MethodDesc
	streams  map[string]*grpc.StreamDesc
	metadata any
}

// NewServer returns a server with no services registered.
func NewServer(opts ...ServerOption) *Server {
	s := &Server{services: map[string]*serviceInfo{}, lis: map[net.Listener]struct{}{}, conns: map[*h2conn.Conn]struct{}{}, pending: map[*pendingHandshake]struct{}{}}
	for _, o := range opts {
		o.applyServer(&s.opts)
	}
	o := &s.opts
	s.unaryInt = chainUnaryServer(o.unaryInts)
	s.strInt = chainStreamServer(o.streamInts)
	s.stats = combineStats(o.statsHandlers)
	s.workers = newWorkerPool(int(o.numStreamWorkers))
	pool := bufpool.Default()
	if o.bufferPool != nil {
		pool = bufpool.New(o.bufferPool)
	}
	s.wireCfg = grpcwire.ServerConfig{Pool: pool, MaxRecv: o.maxRecv, MaxSend: o.maxSend, Codec: o.codec,
		AliasBytes: aliasBytes(o.aliasBytes)}
	o.webProtocols = !o.noWebProtocols
	if o.corsOrigins != nil {
		s.cors = webwire.NewCORS(o.corsOrigins)
	}
	if o.maxConcurrentStreams == 0 {
		// grpc-go's servers advertise no limit unless told to; ours
		// advertises one, which clients queue behind
		// (h2conn/limits.go).
		o.maxConcurrentStreams = h2conn.ServerMaxConcurrentStreams
	}
	if o.maxFrameSize == 0 {
		s.raiseFrame = grpcMaxFrameSize
	}
	s.h2cfg = h2conn.Config{
		MaxConcurrentStreams:    o.maxConcurrentStreams,
		MaxFrameSize:            o.maxFrameSize,
		InitialStreamWindow:     windowSize(o.initialWindow),
		InitialConnWindow:       windowSize(o.initialConnWindow),
		DisableBDP:              o.staticWindows,
		MaxHeaderListSize:       cmp.Or(o.maxHeaderListSize, h2conn.DefaultServerMaxHeaderListSize),
		HeaderTableSize:         o.headerTableSize,
		Pool:                    pool,
		PooledReads:             pooledReads(o.readBufferPooling),
		RecvLowWater:            recvLowWater(o.recvLowWater),
		PingMinTime:             o.kep.MinTime,
		PingPermitWithoutStream: o.kep.PermitWithoutStream,
		MaxConnectionIdle:       o.kp.MaxConnectionIdle,
		MaxConnectionAge:        o.kp.MaxConnectionAge,
		MaxConnectionAgeGrace:   o.kp.MaxConnectionAgeGrace,
		ServerKeepaliveTime:     o.kp.Time,
		ServerKeepaliveTimeout:  o.kp.Timeout,
	}
	if s.h2cfg.ServerKeepaliveTime == 0 {
		s.h2cfg.ServerKeepaliveTime = 2 * time.Hour // grpc-go's default
	}
	if o.connTimeout == 0 {
		o.connTimeout = h2conn.DefaultPrefaceTimeout // grpc-go: 120 s (OPTIONS.md)
	}
	// As in grpc-go, ConnectionTimeout covers the preface and first
	// SETTINGS too; the engine's own timer bounds them, from the end of
	// the credentials handshake.
	s.h2cfg.PrefaceTimeout = o.connTimeout
	// A peer stalled inside a frame is bounded by the same figure
	// (h2conn/stall.go); grpc-go has no such bound.
	s.h2cfg.FrameStallTimeout = o.connTimeout
	s.h2cfg.Budget = budget.Default()
	if o.memoryBudget > 0 {
		s.h2cfg.Budget = budget.New(o.memoryBudget)
	}
	// One list of the server's limit must be receivable whatever the
	// budget's cap on header blocks (budget/limits.go); 16 KiB is the
	// frame layer's slack over the list limit.
	s.h2cfg.Budget.AllowBlocks(int64(s.h2cfg.MaxHeaderListSize) + 16<<10)
	s.offenders.maxInterval = defaultOffenderMaxInterval
	if o.offenderBackoff != nil {
		s.offenders.maxInterval = *o.offenderBackoff
	}
	return s
}

// RegisterService registers a service and its implementation; it must be
// called before Serve. As in grpc-go, an implementation that does not
// implement desc.HandlerType, a duplicate, or a registration after Serve is
// a programming error and panics.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	if impl != nil && desc.HandlerType != nil {
		ht := reflect.TypeOf(desc.HandlerType).Elem()
		if st := reflect.TypeOf(impl); !st.Implements(ht) {
			panic(fmt.Sprintf("grpc: Server.RegisterService found the handler of type %v that does not satisfy %v", st, ht))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		panic(fmt.Sprintf("grpc: Server.RegisterService after Server.Serve for %q", desc.ServiceName))
	}
	if _, ok := s.services[desc.ServiceName]; ok {
		panic(fmt.Sprintf("grpc: Server.RegisterService found duplicate service registration for %q", desc.ServiceName))
	}
	info := &serviceInfo{impl: impl, methods: map[string]*grpc.MethodDesc{}, streams: map[string]*grpc.StreamDesc{}, metadata: desc.Metadata}
	for i := range desc.Methods {
		info.methods[desc.Methods[i].MethodName] = &desc.Methods[i]
	}
	for i := range desc.Streams {
		info.streams[desc.Streams[i].StreamName] = &desc.Streams[i]
	}
	s.services[desc.ServiceName] = info
}

// GetServiceInfo returns the registered services, as grpc.Server does.
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	ret := make(map[string]grpc.ServiceInfo, len(s.services))
	for name, info := range s.services {
		methods := make([]grpc.MethodInfo, 0, len(info.methods)+len(info.streams))
		for m := range info.methods {
			methods = append(methods, grpc.MethodInfo{Name: m})
		}
		for m, d := range info.streams {
			methods = append(methods, grpc.MethodInfo{Name: m, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams})
		}
		ret[name] = grpc.ServiceInfo{Methods: methods, Metadata: info.metadata}
	}
	return ret
}

// Serve accepts connections on lis until Stop or GracefulStop, serving each
// on its own goroutine. It returns nil after a stop, else the Accept error.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	s.serving = true
	if s.stopped {
		s.mu.Unlock()
		lis.Close()
		return ErrServerStopped
	}
	s.lis[lis] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lis, lis)
		s.mu.Unlock()
		lis.Close()
	}()

	var delay time.Duration
	for {
		nc, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			stopped := s.stopped
			s.mu.Unlock()
			if stopped {
				return nil
			}
			var ne interface{ Temporary() bool }
			if errors.As(err, &ne) && ne.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if !s.offenders.admit(nc.RemoteAddr(), time.Now()) {
			// A repeat offender's connection beyond its rate
			// (offenders.go): reset, so that neither side keeps the
			// socket in TIME_WAIT.
			if tc, ok := nc.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			nc.Close()
			continue
		}
		if s.h2cfg.Budget.RefusesConns() {
			// The memory budget is under pressure: a new connection
			// would add to it before it could be refused anything.
			nc.Close()
			continue
		}
		// The count goes up under mu, where Stop and GracefulStop set
		// stopped before they wait for it: a connection accepted as the
		// server stops is either counted before the wait or closed here,
		// never added while the wait is under way.
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.connWG.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc)
	}
}

// serveConn runs the credentials handshake and starts the HTTP/2
// connection on the accept loop's goroutine for nc; the goroutine returns
// once the connection is idle, and the connection's end is handled by the
// engine's onEnd. A TLS handshake on a socket the idle poller serves first
// waits there for the client's first bytes (handshake.go).
func (s *Server) serveConn(nc net.Conn) {
	if s.opts.creds == nil && !s.sniffsHTTP1() {
		s.startConn(nc, nil, time.Time{})
		return
	}
	s.handshakeConn(nc)
}

// startConn starts the HTTP/2 connection over nc, secured by auth.
func (s *Server) startConn(nc net.Conn, auth credentials.AuthInfo, deadline time.Time) {
	sc := &serverConn{srv: s}
	sc.peer = peer.Peer{Addr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr(), AuthInfo: auth}
	s.h2cfg.Budget.Charge(budget.GreetingBytes)
	sc.greetCharged.Store(true)
	conn := h2conn.NewServerConn(nc, s.h2cfg, sc)
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		conn.Close()
		sc.releaseGreeting()
		s.connWG.Done()
		return
	}
	s.conns[conn] = struct{}{}
	if !deadline.IsZero() {
		// Set under mu, before the connection can greet or end (both
		// stop it there, and take mu to read it).
		sc.greetBy = time.AfterFunc(time.Until(deadline), func() {
			if !sc.greeted.Load() {
				conn.Close()
			}
		})
	}
	s.mu.Unlock()
	conn.ServeAsync(nil) // sc.ConnEnded runs at the end
}

// stopGreetTimer stops the handshake-deadline timer, so that it holds the
// connection no longer than its life.
func (sc *serverConn) stopGreetTimer() {
	s := sc.srv
	s.mu.Lock()
	t := sc.greetBy
	sc.greetBy = nil
	s.mu.Unlock()
	if t != nil {
		t.Stop()
	}
}

// ConnGreeted is the engine's h2conn.GreetHandler hook: the client's
// preface and SETTINGS came. Stats handlers hear of the connection from
// here, as from grpc-go's server, whose transport reads both before it
// reports ConnBegin; a connection that never greets is never reported.
func (sc *serverConn) ConnGreeted(*h2conn.Conn) {
	sc.greeted.Store(true)
	sc.stopGreetTimer()
	sc.releaseGreeting()
	if sh := sc.srv.stats; sh != nil {
		sc.beginConnStats(sh)
	}
}

// ConnEnded is the engine's end hook for the connection (h2conn.EndHandler:
// no closure per connection).
func (sc *serverConn) ConnEnded(conn *h2conn.Conn) {
	sc.stopGreetTimer()
	sc.releaseGreeting()
	s := sc.srv
	if abusive(conn.Err()) {
		s.offenders.offended(sc.peer.Addr, time.Now())
	}
	if sc.stats != nil {
		s.stats.HandleConn(sc.stats.ctx, &stats.ConnEnd{})
	}
	s.mu.Lock()
	delete(s.conns, conn)
	s.mu.Unlock()
	s.connWG.Done()
}

// Stop closes every listener and connection at once; RPCs in flight see
// their context canceled. It returns once the connections' goroutines have
// returned; like grpc-go's, it does not wait for handlers, which may still
// be returning.
func (s *Server) Stop() {
	s.mu.Lock()
	s.stopped = true
	for l := range s.lis {
		l.Close()
	}
	conns := make([]*h2conn.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	pending := s.takePendingLocked()
	s.mu.Unlock()
	closePending(pending)
	s.stopHTTP1(false)
	for _, c := range conns {
		c.Close()
	}
	s.connWG.Wait()
	s.workers.stop()
	if s.opts.waitForHandlers {
		s.handlers.Wait()
	}
}

// GracefulStop stops accepting connections and streams, lets in-flight RPCs
// finish, then returns.
func (s *Server) GracefulStop() {
	s.mu.Lock()
	s.stopped = true
	for l := range s.lis {
		l.Close()
	}
	conns := make([]*h2conn.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	pending := s.takePendingLocked()
	s.mu.Unlock()
	closePending(pending)
	for _, c := range conns {
		c.GracefulShutdown()
	}
	s.stopHTTP1(true)
	s.connWG.Wait()
	s.handlers.Wait()
	s.workers.stop()
}

// serverConn is the h2conn.Handler of one accepted connection.
//
// Every call's context derives from the connection's, which carries the peer
// and is never canceled itself: the engine ends each stream's context
// through its reset hook when the connection ends, however it ends, so an
// idle connection keeps no cancel context, Done channel or children map.
// The serverConn is that context itself (see Value), so that it costs no
// allocation of its own.
type serverConn struct {
	srv   *Server
	peer  peer.Peer  // in the same allocation as the serverConn
	stats *connStats // with a stats handler: the context TagConn returned
	// greetBy, after a credentials handshake, closes the connection if
	// the client has not greeted by the end of ConnectionTimeout counted
	// from the accept, as grpc-go's one deadline covers both; the
	// engine's own preface timer counts from the handshake's end.
	greetBy *time.Timer
	greeted atomic.Bool
	// greetCharged: budget.GreetingBytes is charged, until the client
	// greets or the connection ends.
	greetCharged atomic.Bool
}

// releaseGreeting returns the connection's charge for its wait for the
// client's greeting, once.
func (sc *serverConn) releaseGreeting() {
	if sc.greetCharged.CompareAndSwap(true, false) {
		sc.srv.h2cfg.Budget.Charge(-budget.GreetingBytes)
	}
}

// peerCtxKey is the key under which grpc-go's peer package looks for the
// Peer in a context, learned once by asking peer.FromContext through a
// probe; nil if that did not work, and each call's context is then made
// with peer.NewContext.
//
// Why probe: grpc-go's keys are private, and its public constructors
// (peer.NewContext, metadata.NewIncomingContext,
// grpc.NewContextWithServerTransportStream) each allocate a context value;
// answering the learned keys from objects the server has anyway saves
// three allocations per call (PERFORMANCE.md, 2026-11-26, "the handler's
// context"). The keys are grpc-go's internals, so TestGrpcGoContextKeys
// checks them against its public constructors and getters and fails,
// naming the grpc-go version, if an upgrade changes them; the fallback
// through the public constructors keeps such a server correct.
var peerCtxKey = probeKey(func(ctx context.Context) { peer.FromContext(ctx) })

// probeKey returns the key of the first Value call that lookup makes on
// the context it is given, or nil (also if lookup panics).
func probeKey(lookup func(context.Context)) (key any) {
	p := keyProbe{Context: context.Background()}
	defer func() {
		if recover() != nil {
			key = nil
		}
	}()
	lookup(&p)
	return p.key
}

// keyProbe is a context that records the key of the first Value call.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}

// context returns the connection's context.
func (sc *serverConn) context() context.Context {
	if sc.stats != nil {
		return sc.stats.ctx
	}
	if peerCtxKey == nil {
		return peer.NewContext(context.Background(), &sc.peer)
	}
	return sc
}

// The context.Context methods: a background context that holds the peer.

func (*serverConn) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*serverConn) Done() <-chan struct{}       { return nil }
func (*serverConn) Err() error                  { return nil }
func (sc *serverConn) Value(key any) any {
	if key == peerCtxKey {
		return &sc.peer
	}
	return nil
}
func (*serverConn) String() string { return "leangrpc.serverConn" }

// HandleStream runs on the connection's reader: it parses the request,
// prepares the stream (so that a reset from now on cancels its context)
// and hands it to a handler worker (workers.go).
func (sc *serverConn) HandleStream(st *h2conn.Stream) {
	s := sc.srv
	r := &rpc{srv: s}
	req, rej := grpcwire.ParseRequestScratch(st.Headers(), r.scratch[:])
	if rej != nil {
		if rej.Plain && sc.serveWebStream(st) {
			return // a web protocol's call, or a request for the HTTPHandler
		}
		rq := req // only this branch pays for a heap copy
		go grpcwire.RejectStream(st, &rq, rej)
		return
	}
	if s.raiseFrame != 0 {
		// The connection carries gRPC: let the client send large
		// messages in large frames (h2conn.Conn.RaiseMaxFrameSize; once
		// per connection, a compare afterwards).
		st.Conn().RaiseMaxFrameSize(s.raiseFrame)
	}
	parent := sc.context()
	if s.opts.inTap != nil {
		var rej *grpcwire.Reject
		if parent, rej = s.tap(parent, &req); rej != nil {
			rq := req
			go grpcwire.RejectStream(st, &rq, rej)
			return
		}
	}
	// The stream's reset handler is registered below, before the call
	// is handed on: a unary call's together with its arrival handler.
	r.ss.InitUnregistered(parent, st, req, &s.wireCfg)
	if ctxKeysLearned {
		r.ss.SetContext(r)
	}
	s.handlers.Add(1)
	var arrival h2conn.ArrivalHandler // a unary handler waiting for its request
	inline := false
	if r.info, r.unary = s.unaryMethod(req.Method); r.unary != nil {
		// The reader runs the handler itself once the request is in, if
		// the call is the connection's only one (h2conn's reader.go).
		inline = st.RunInline(r)
		if !inline && !r.ss.Expired() {
			arrival = r
		}
	}
	if r.ss.Register(arrival) || inline {
		return // RequestArrived or the reader goes on
	}
	s.workers.run(r)
}

// RequestArrived is the engine's h2conn.ArrivalHandler for a unary call
// whose request had not begun when its HEADERS came: its first DATA frame
// or END_STREAM has come now, or its stream ended first. A unary handler
// has nothing to do before its request, so a stream that a client opens
// and resets at once (the rapid reset attack) costs no handler: a call
// whose context ended before its request is finished here, on the
// goroutine that ended it, as grpc-go's would fail reading its request
// before any user code ran. With stats handlers it runs the usual way, so
// that they see the call begin and end as on grpc-go.
func (r *rpc) RequestArrived() {
	s := r.srv
	switch err := r.ss.Ctx.Err(); {
	case err == nil || s.stats != nil:
		s.workers.run(r)
	case err == context.DeadlineExceeded:
		// Called from the deadline's reset, under the stream's lock.
		go r.finishEnded(statusDeadline)
	default:
		r.finishEnded(statusCanceled)
	}
}

// finishEnded finishes a unary call whose context ended before its request
// arrived, without running its handler.
func (r *rpc) finishEnded(st *status.Status) {
	defer r.srv.handlers.Done()
	r.ss.FinishUnstarted(st)
}

// tap runs the InTapHandle on a request, as grpc-go does: on the
// connection's reader, before anything else is done for the call, with
// the request's method and metadata. The context it returns is the
// parent of the call's; an error answers the call with its status
// (PermissionDenied for an error that is not a status) and runs nothing.
func (s *Server) tap(ctx context.Context, req *grpcwire.Request) (context.Context, *grpcwire.Reject) {
	ctx, err := s.opts.inTap(ctx, &tap.Info{FullMethodName: req.Method, Header: req.BuildMD()})
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			st = status.New(codes.PermissionDenied, err.Error())
		}
		return nil, &grpcwire.Reject{HTTPStatus: http.StatusOK, Status: st}
	}
	return ctx, nil
}

// unaryMethod returns the registered unary method that method names and its
// service, or nil.
func (s *Server) unaryMethod(method string) (*serviceInfo, *grpc.MethodDesc) {
	service, name, ok := grpcwire.SplitMethod(method)
	if !ok {
		return nil, nil
	}
	info := s.services[service]
	if info == nil {
		return nil, nil
	}
	return info, info.methods[name]
}

// rpc holds everything one call needs on the server, allocated together
// (768 bytes, all of its size class; the receive side's Parser and the
// response fields' scratch come from pools for as long as they are used).
// It is the handler's context too (see Value): its cancelable part is the
// ServerStream's CallContext, its values the metadata, the transport
// stream (the rpc itself, as transportStream) and the connection's.
type rpc struct {
	srv     *Server
	info    *serviceInfo     // with unary: its service
	unary   *grpc.MethodDesc // the registered unary method called, if it is one
	ss      grpcwire.ServerStream
	stream  serverStream
	scratch [14]string // backs the request's metadata fields (seven)
}

// ServeInline runs the call on the connection's reader (h2conn.RunInline).
func (r *rpc) ServeInline() { r.handle() }

func (r *rpc) handle() {
	s := r.srv
	defer s.handlers.Done()
	ss := &r.ss
	if ss.Expired() {
		// A grpc-timeout already over: grpc-go answers at once, without
		// running the handler or telling stats handlers.
		ss.Finish(statusDeadline)
		return
	}
	ctx := r.context()
	method := ss.Req.Method
	var service, name string
	if r.unary == nil { // else HandleStream found the method already
		var ok bool
		if service, name, ok = grpcwire.SplitMethod(method); !ok {
			// No stats either: grpc-go refuses the name before it tags.
			ss.Finish(status.Newf(codes.Unimplemented, "malformed method name: %q", method))
			return
		}
	}
	r.stream = serverStream{ss: ss}
	if s.stats != nil {
		r.stream.stats = tagServerCall(s.stats, ctx, ss)
		ctx = r.stream.stats.ctx
	}
	r.stream.ctx = ctx
	if r.unary != nil {
		s.processUnary(ctx, &r.stream, r.info, r.unary)
		return
	}

	// services is read without mu: RegisterService refuses to run once
	// Serve has started, and this goroutine descends from Serve's.
	info := s.services[service]
	if info != nil {
		if md, ok := info.methods[name]; ok {
			s.processUnary(ctx, &r.stream, info, md)
			return
		}
		if sd, ok := info.streams[name]; ok {
			r.stream.single = !sd.ClientStreams
			s.processStream(&r.stream, info, sd, method)
			return
		}
	}
	if h := s.opts.unknownHandler; h != nil {
		r.stream.single = false
		s.processStream(&r.stream, nil, &grpc.StreamDesc{StreamName: name, Handler: h, ClientStreams: true, ServerStreams: true}, method)
		return
	}
	if info != nil {
		r.stream.finish(status.Newf(codes.Unimplemented, "unknown method %v for service %v", name, service))
		return
	}
	r.stream.finish(status.Newf(codes.Unimplemented, "unknown service %v", service))
}

// context returns the handler's context: the rpc itself, unless grpc-go's
// context keys could not be learned.
func (r *rpc) context() context.Context {
	if ctxKeysLearned {
		return r
	}
	ctx := metadata.NewIncomingContext(r.ss.Context(), r.ss.IncomingMD())
	return grpc.NewContextWithServerTransportStream(ctx, (*transportStream)(r))
}

// The context.Context methods of a call's context: those of its
// CallContext, with the incoming metadata and the transport stream as
// values under the keys grpc-go's packages use.

func (r *rpc) Deadline() (time.Time, bool)    { return r.ss.Ctx.Deadline() }
func (r *rpc) Done() <-chan struct{}          { return r.ss.Ctx.Done() }
func (r *rpc) Err() error                     { return r.ss.Ctx.Err() }
func (r *rpc) AfterFunc(f func()) func() bool { return r.ss.Ctx.AfterFunc(f) }
func (r *rpc) String() string                 { return "leangrpc.rpc(" + r.ss.Req.Method + ")" }
func (r *rpc) Value(key any) any {
	switch key {
	case mdCtxKey:
		// Calls share their map while their fields are the same.
		return r.ss.IncomingMDShared(&r.srv.mdCache)
	case stsCtxKey:
		return (*transportStream)(r)
	case protocolKey{}:
		if t, ok := r.ss.Transport().(*webwire.Transport); ok {
			return t.Protocol()
		}
		return nil
	}
	return r.ss.Ctx.Value(key)
}

// mdCtxKey and stsCtxKey are the keys under which grpc-go's metadata
// package looks for the incoming metadata and grpc looks for the
// ServerTransportStream, learned once by probes as peerCtxKey is. When
// either is unknown, handlers get contexts made with
// metadata.NewIncomingContext and grpc.NewContextWithServerTransportStream.
var (
	mdCtxKey       = probeKey(func(ctx context.Context) { metadata.FromIncomingContext(ctx) })
	stsCtxKey      = probeKey(func(ctx context.Context) { grpc.ServerTransportStreamFromContext(ctx) })
	ctxKeysLearned = mdCtxKey != nil && stsCtxKey != nil && mdCtxKey != stsCtxKey
)

// appStatus converts a handler's error as grpc-go does: status errors
// keep their status, context errors map to their codes, others are
// Unknown.
func appStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

// unknownEncoding answers a call whose grpc-encoding names no registered
// compressor, as grpc-go does before the handler runs, and reports whether
// it did.
func unknownEncoding(ss *grpcwire.ServerStream) bool {
	st := grpcwire.UnknownEncoding(ss.Req.Encoding)
	if st == nil {
		return false
	}
	ss.Finish(st)
	return true
}

func (s *Server) processUnary(ctx context.Context, stream *serverStream, info *serviceInfo, md *grpc.MethodDesc) {
	ss := stream.ss
	if ss.Req.Encoding != "" && unknownEncoding(ss) {
		return
	}
	if stream.stats != nil {
		// grpc-go runs a unary method as a stream that is neither
		// client- nor server-streaming.
		stream.stats.beginCall(false, false)
	}
	reply, err := md.Handler(info.impl, ctx, stream.recvOne, s.unaryInt)
	if err != nil {
		stream.finish(appStatus(err))
		return
	}
	if err := stream.sendLast(reply); err != nil {
		stream.finish(appStatus(err))
		return
	}
	stream.finish(statusOK)
}

var (
	statusOK       = status.New(codes.OK, "")
	statusDeadline = status.New(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	statusCanceled = status.New(codes.Canceled, context.Canceled.Error())
)

// processStream runs a streaming handler; info is nil for the unknown
// service handler.
func (s *Server) processStream(stream *serverStream, info *serviceInfo, sd *grpc.StreamDesc, method string) {
	ss := stream.ss
	if ss.Req.Encoding != "" && unknownEncoding(ss) {
		return
	}
	var impl any
	if info != nil {
		impl = info.impl
	}
	if stream.stats != nil {
		stream.stats.beginCall(sd.ClientStreams, sd.ServerStreams)
	}
	var err error
	if s.strInt != nil {
		err = s.strInt(impl, stream, &grpc.StreamServerInfo{
			FullMethod: method, IsClientStream: sd.ClientStreams, IsServerStream: sd.ServerStreams,
		}, sd.Handler)
	} else {
		err = sd.Handler(impl, stream)
	}
	if err != nil {
		stream.finish(appStatus(err))
		return
	}
	stream.finish(statusOK)
}

// serverStream implements grpc.ServerStream over grpcwire.ServerStream.
type serverStream struct {
	ss     *grpcwire.ServerStream
	ctx    context.Context
	stats  *serverCallStats // nil without a stats handler
	single bool             // the client sends exactly one message (not client-streaming)
	got    bool             // single: the message was received
}

func (s *serverStream) SetHeader(md metadata.MD) error {
	if err := validMD(md); err != nil {
		return err
	}
	return s.ss.SetHeader(md)
}

func (s *serverStream) SendHeader(md metadata.MD) error {
	if err := validMD(md); err != nil {
		return err
	}
	if s.stats != nil {
		return s.stats.sendHeader(s.ss, md)
	}
	return s.ss.SendHeader(md)
}

// SetTrailer drops md if a field of it cannot be sent (grpc-go logs it and
// sends the malformed field, which makes the client reset the stream).
func (s *serverStream) SetTrailer(md metadata.MD) {
	if validMD(md) == nil {
		s.ss.SetTrailer(md)
	}
}

// validMD checks metadata a handler sends, as grpc-go does: a field HTTP/2
// cannot carry is refused with Internal.
func validMD(md metadata.MD) error {
	if err := grpcwire.ValidateMD(md); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

func (s *serverStream) Context() context.Context { return s.ctx }

func (s *serverStream) SendMsg(m any) error {
	if s.stats != nil {
		return s.stats.sendMsg(s.ss, m, false)
	}
	return s.ss.SendMsg(m)
}

// sendLast sends a unary response, which the status follows at once.
func (s *serverStream) sendLast(m any) error {
	if s.stats != nil {
		return s.stats.sendMsg(s.ss, m, true)
	}
	return s.ss.SendLastMsg(m)
}

// finish ends the call with st.
func (s *serverStream) finish(st *status.Status) {
	if s.stats != nil {
		s.stats.finish(s.ss, st)
		return
	}
	s.ss.Finish(st)
}

// recvMsg receives the next message into m.
func (s *serverStream) recvMsg(m any) error {
	if s.stats != nil {
		return s.stats.recvMsg(s.ss, m)
	}
	return s.ss.RecvMsg(m)
}

func (s *serverStream) RecvMsg(m any) error {
	if s.single {
		if s.got {
			return io.EOF
		}
		return s.recvOne(m)
	}
	return s.recvMsg(m)
}

// recvOne receives the one request message of an RPC that is not
// client-streaming and checks, as grpc-go does, that the client sends no
// second one. A violation is Unimplemented, as gRPC's status code document
// and Connect's conformance suite have it (grpc-go says Internal).
func (s *serverStream) recvOne(m any) error {
	s.got = true
	if err := s.recvMsg(m); err != nil {
		if err == io.EOF {
			return status.Error(codes.Unimplemented, "cardinality violation: received no request message from non-client-streaming RPC")
		}
		return err
	}
	switch err := s.ss.SkipMsg(); err {
	case io.EOF:
		return nil
	case nil:
		return status.Error(codes.Unimplemented, "cardinality violation: received multiple request messages for non-client-streaming RPC")
	default:
		return err
	}
}

// transportStream is a call's rpc as the grpc.ServerTransportStream for
// grpc.SetHeader, grpc.SendHeader, grpc.SetTrailer and grpc.Method.
type transportStream rpc

func (t *transportStream) Method() string { return t.ss.Req.Method }
func (t *transportStream) SetHeader(md metadata.MD) error {
	if err := validMD(md); err != nil {
		return err
	}
	return t.ss.SetHeader(md)
}

func (t *transportStream) SendHeader(md metadata.MD) error {
	// Through the call's serverStream: its stats handler sees the headers.
	return t.stream.SendHeader(md)
}

func (t *transportStream) SetTrailer(md metadata.MD) error {
	if err := validMD(md); err != nil {
		return err
	}
	return t.ss.SetTrailer(md)
}

var (
	_ grpc.ServiceRegistrar      = (*Server)(nil)
	_ grpc.ServerStream          = (*serverStream)(nil)
	_ grpc.ServerTransportStream = (*transportStream)(nil)
)

// securedConn hides everything but net.Conn's methods of a conn returned by
// a credentials handshake. Such conns (tls.Conn, grpc-go's wrappers) may
// expose the socket under them through NetConn or SyscallConn; the engine's
// socket layer would then read and write the raw, encrypted bytes.
type securedConn struct{ net.Conn }

// secured returns c, the result of a handshake on raw (forHandshake's),
// made opaque unless the handshake returned raw itself (plaintext
// credentials), or a TLS conn whose reader can wait for the socket under
// it (sockio.SecuredTLS).
func secured(raw, c net.Conn) net.Conn {
	if c == raw {
		return c
	}
	if t := sockio.SecuredTLS(raw, c); t != nil {
		return t
	}
	return securedConn{c}
}

// forHandshake returns the conn to hand creds' handshake over raw: for TLS
// credentials with pooled reads, sockio's, which reads whole TLS records
// only, so that an idle connection can wait for its socket's readability
// without a goroutine (sockio.SecuredTLS); raw otherwise.
func forHandshake(raw net.Conn, creds credentials.TransportCredentials, pooled bool) net.Conn {
	if !pooled || creds.Info().SecurityProtocol != "tls" {
		return raw
	}
	return sockio.ForTLSHandshake(raw)
}
