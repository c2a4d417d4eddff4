package leangrpc

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// callInfo is what a call's options decide.
type callInfo struct {
	waitForReady bool
	maxRecv      int
	maxSend      int
	subtype      string
	codec        encoding.CodecV2
	namedCodec   bool // codec came from ForceCodec or ForceCodecV2: its name is the default subtype
	headerAddrs  []*metadata.MD
	trailerAddrs []*metadata.MD
	peerAddrs    []*peer.Peer
	onFinish     []func(error)
	authority    string
	perRPC       credentials.PerRPCCredentials
	// compressor is grpc.UseCompressor's name ("" none); comp its
	// registered compressor (nil for none and Identity).
	compressor string
	comp       encoding.Compressor
	// via is the SubConn a producer's call runs on (subConn.NewStream);
	// nil for the calls the picker places. waitedResolver says the call
	// waited for the resolver's first report: its pick was delayed, as a
	// stats handler hears (DelayedPickComplete).
	via            *subConn
	waitedResolver bool
	// nameResolutionDelay says the call waited for the resolver's
	// first report (it had none yet when the call came, and did not get
	// one while leaving idle mode), for every attempt's RPCTagInfo.
	nameResolutionDelay bool
	// waitForReadySet says a call option set waitForReady: it wins over
	// the method config's.
	waitForReadySet bool
	// retryBuffer is grpc.MaxRetryRPCBufferSize's bytes (default 256 KiB):
	// the request messages a call under a retry policy keeps for replay.
	retryBuffer int
	// previousAttempts is the grpc-previous-rpc-attempts of the attempt
	// being opened; keepTrailer makes a unary call parse the metadata of
	// a Trailers-Only response (grpc-retry-pushback-ms) even without the
	// Trailer call option.
	previousAttempts int
	keepTrailer      bool
}

// parseCallOptions reads grpc-go's exported call options and applies the
// method config mc (nil for none) as grpc-go does: a call option's
// waitForReady wins, and the smaller of the two limits of a message size
// applies. Options it does not know (grpc-go's unexported ones) are
// ignored.
func parseCallOptions(defaults, opts []grpc.CallOption, mc *methodConfig) (callInfo, error) {
	ci := callInfo{retryBuffer: defaultRetryBufferSize}
	for _, list := range [2][]grpc.CallOption{defaults, opts} {
		for _, o := range list {
			switch o := o.(type) {
			case grpc.FailFastCallOption:
				ci.waitForReady, ci.waitForReadySet = !o.FailFast, true
			case *grpc.FailFastCallOption:
				ci.waitForReady, ci.waitForReadySet = !o.FailFast, true
			case grpc.MaxRecvMsgSizeCallOption:
				ci.maxRecv = o.MaxRecvMsgSize
			case grpc.MaxSendMsgSizeCallOption:
				ci.maxSend = o.MaxSendMsgSize
			case grpc.HeaderCallOption:
				ci.headerAddrs = append(ci.headerAddrs, o.HeaderAddr)
			case grpc.TrailerCallOption:
				ci.trailerAddrs = append(ci.trailerAddrs, o.TrailerAddr)
			case grpc.PeerCallOption:
				ci.peerAddrs = append(ci.peerAddrs, o.PeerAddr)
			case grpc.OnFinishCallOption:
				ci.onFinish = append(ci.onFinish, o.OnFinish)
			case grpc.ContentSubtypeCallOption:
				ci.subtype = o.ContentSubtype
			case grpc.ForceCodecV2CallOption:
				ci.codec, ci.namedCodec = o.CodecV2, true
			case grpc.ForceCodecCallOption:
				ci.codec, ci.namedCodec = grpcwire.V1Codec(o.Codec), true
			case grpc.CustomCodecCallOption:
				// grpc-go's deprecated grpc.Codec: it marshals, but
				// names no content-subtype.
				ci.codec, ci.namedCodec = grpcwire.BytesCodec(o.Codec, o.Codec.String()), false
			case grpc.AuthorityOverrideCallOption:
				ci.authority = o.Authority
			case grpc.PerRPCCredsCallOption:
				ci.perRPC = o.Creds
			case grpc.CompressorCallOption:
				ci.compressor = o.CompressorType
			case grpc.MaxRetryRPCBufferSizeCallOption:
				ci.retryBuffer = o.MaxRetryRPCBufferSize
			}
		}
	}
	if mc != nil {
		ci.applyMethodConfig(mc)
	}
	if ci.codec == nil {
		// As grpc-go: the codec registered for the subtype, proto when
		// none is asked for, an error for a subtype nobody registered
		// (grpc.CallContentSubtype lowercases it).
		c, ok := grpcwire.CodecFor(ci.subtype)
		if !ok && ci.subtype != "" {
			return ci, status.Errorf(codes.Internal, "no codec registered for content-subtype %s", ci.subtype)
		}
		ci.codec = c
	} else if ci.subtype == "" && ci.namedCodec {
		// A forced codec names the subtype unless the call set one.
		ci.subtype = strings.ToLower(ci.codec.Name())
	}
	if ci.maxRecv == 0 {
		ci.maxRecv = grpcwire.DefaultMaxRecvMsgSize
	}
	if ci.compressor != "" && ci.compressor != grpcwire.Identity {
		if ci.comp = encoding.GetCompressor(ci.compressor); ci.comp == nil {
			return ci, status.Errorf(codes.Internal, "grpc: Compressor is not installed for requested grpc-encoding %q", ci.compressor)
		}
	}
	return ci, nil
}

// applyMethodConfig applies a method config's waitForReady and message
// size limits to what the call options decided.
func (ci *callInfo) applyMethodConfig(mc *methodConfig) {
	if mc.waitForReady != nil && !ci.waitForReadySet {
		ci.waitForReady = *mc.waitForReady
	}
	// 0 is "not set" in callInfo: the default receive limit, no send
	// limit.
	if n := mc.maxRespSize; n != nil && (ci.maxRecv == 0 || *n < ci.maxRecv) {
		ci.maxRecv = *n
	}
	if n := mc.maxReqSize; n != nil && (ci.maxSend == 0 || *n < ci.maxSend) {
		ci.maxSend = *n
	}
}

// newRequest builds the request headers of a call.
func (cc *ClientConn) newRequest(ctx context.Context, method string, ci *callInfo) (grpcwire.Request, error) {
	req := grpcwire.Request{
		Method:         method,
		Authority:      cc.authority,
		Scheme:         cc.scheme(),
		ContentSubtype: ci.subtype,
		UserAgent:      cc.userAgent,
		Encoding:       ci.compressor,
		AcceptEncoding: cc.acceptEncoding,

		PreviousAttempts: int32(ci.previousAttempts),
	}
	if ci.compressor != "" {
		req.AcceptEncoding = grpcwire.AcceptEncoding(cc.acceptEncoding, ci.compressor)
	}
	if ci.authority != "" {
		req.Authority = ci.authority
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		// As grpc-go: a field HTTP/2 cannot carry fails the call
		// before anything is sent.
		if err := grpcwire.ValidateMD(md); err != nil {
			return req, status.Error(codes.Internal, err.Error())
		}
		req.MD = md
	}
	return req, nil
}

// openStream gets a connection from the picker and opens the call's stream
// on it, trying again (at most twice) when the connection was going away,
// since nothing was sent then.
func (cc *ClientConn) openStream(ctx context.Context, method string, ci *callInfo, hold bool) (*grpcwire.ClientStream, picked, error) {
	// A context that already ended fails the call before anything is
	// sent, as grpc-go's does; otherwise a fast server could answer before
	// the stream's wait notices the context.
	if err := ctx.Err(); err != nil {
		return nil, picked{}, status.FromContextError(err).Err()
	}
	req, err := cc.newRequest(ctx, method, ci)
	if err != nil {
		return nil, picked{}, err
	}
	userMD := req.MD
	withCreds := len(cc.opts.perRPC) > 0 || ci.perRPC != nil
	cfg := cc.streamConfig(ci, hold)
	for attempt := 0; ; attempt++ {
		p, err := cc.connFor(ctx, method, ci)
		if err != nil {
			return nil, picked{}, err
		}
		req.MD = userMD
		if withCreds {
			// Per-RPC credentials see the connection's AuthInfo, so
			// they run once the connection is chosen, as in grpc-go.
			if req.MD, err = cc.perRPCMetadata(ctx, &req, userMD, ci.perRPC, p.peer.AuthInfo); err != nil {
				p.finish(err)
				return nil, picked{}, err
			}
		}
		if p.md != nil {
			req.MD = metadata.Join(req.MD, p.md)
		}
		cfg := cfg
		if p.done != nil {
			// The balancer's Done hears the trailers (DoneInfo.Trailer,
			// and the load report they may carry).
			cfg.NoMetadata = false
		}
		var cs *grpcwire.ClientStream
		if hold {
			cs, err = grpcwire.NewClientStreamHold(ctx, p.conn, &req, cfg)
		} else {
			cs, err = grpcwire.NewClientStream(ctx, p.conn, &req, cfg)
		}
		if err == nil {
			return cs, p, nil
		}
		p.finish(err)
		if attempt < 2 && retryable(err) {
			continue
		}
		return nil, picked{}, err
	}
}

// connFor returns the connection for a call: the picker's choice, or the
// SubConn's own for a producer's call.
func (cc *ClientConn) connFor(ctx context.Context, method string, ci *callInfo) (picked, error) {
	if ci.via == nil {
		return cc.pick(ctx, method, ci.waitForReady)
	}
	r := ci.via.ready.Load()
	if r == nil || r.conn.IsGoingAway() {
		return picked{}, errSubConnNotReady
	}
	return picked{readyConn: r}, nil
}

// finish tells the balancer that the call it placed ended (PickResult's
// Done), when it asked to hear it.
func (p *picked) finish(err error) {
	if p.done != nil {
		p.done(balancer.DoneInfo{Err: err})
		p.done = nil
	}
}

// streamConfig is the grpcwire configuration of a call's stream.
func (cc *ClientConn) streamConfig(ci *callInfo, hold bool) grpcwire.ClientConfig {
	return grpcwire.ClientConfig{Pool: cc.h2cfg.Load().Pool, Codec: ci.codec, MaxRecv: ci.maxRecv, MaxSend: ci.maxSend,
		AliasBytes: cc.aliasBytes,
		// A unary call shows metadata only through the Header and
		// Trailer call options.
		NoMetadata:           hold && len(ci.headerAddrs) == 0 && len(ci.trailerAddrs) == 0,
		TrailersOnlyMetadata: ci.keepTrailer,
		// Only Invoke holds the request headers, and it waits in the
		// stream's calls from start to end.
		Unary:      hold,
		Compressor: ci.comp}
}

// openStreamStats is openStream with a stats handler: each attempt is
// tagged and begun before it looks for a connection, and ended when it
// fails, as grpc-go's attempts are; the request carries the metadata of
// the context TagRPC returned (a tracer's propagation headers). retry says
// that an earlier attempt of the call failed unprocessed.
func (cc *ClientConn) openStreamStats(ctx context.Context, method string, ci *callInfo, hold, clientStream, serverStream, retry bool) (*grpcwire.ClientStream, picked, *clientCallStats, error) {
	if err := ctx.Err(); err != nil { // before any event, as in grpc-go
		return nil, picked{}, nil, status.FromContextError(err).Err()
	}
	cfg := cc.streamConfig(ci, hold)
	cfg.NoMetadata = false // the handlers see the response's metadata
	for attempt := 0; ; attempt++ {
		cst := cc.beginClientCall(ctx, method, ci, clientStream, serverStream, retry || attempt > 0)
		p, err := cc.connFor(cst.ctx, method, ci)
		if err != nil {
			cst.end(err, nil)
			return nil, picked{}, nil, err
		}
		if p.blocked || ci.waitedResolver {
			ci.waitedResolver = false // the first attempt's alone
			cst.delayedPick()
		}
		req, err := cc.newRequest(cst.ctx, method, ci)
		if err == nil && (len(cc.opts.perRPC) > 0 || ci.perRPC != nil) {
			req.MD, err = cc.perRPCMetadata(cst.ctx, &req, req.MD, ci.perRPC, p.peer.AuthInfo)
		}
		if err != nil {
			p.finish(err)
			cst.end(err, nil)
			return nil, picked{}, nil, err
		}
		if p.md != nil {
			req.MD = metadata.Join(req.MD, p.md)
		}
		cfg.Observer = cst
		var cs *grpcwire.ClientStream
		if hold {
			cs, err = grpcwire.NewClientStreamHold(cst.ctx, p.conn, &req, cfg)
		} else {
			cs, err = grpcwire.NewClientStream(cst.ctx, p.conn, &req, cfg)
		}
		if err == nil {
			cst.outHeader(cc, method, p.peer)
			return cs, p, cst, nil
		}
		p.finish(err)
		cst.end(err, nil)
		if attempt < 2 && retryable(err) {
			continue
		}
		return nil, picked{}, nil, err
	}
}

func retryable(err error) bool {
	var he *h2conn.Error
	return status.Code(err) == codes.Unavailable && (errors.Is(err, h2conn.ErrGoingAway) || errors.As(err, &he) && he.Unprocessed ||
		errors.Is(err, h2conn.ErrConnClosed) || errors.Is(err, net.ErrClosed))
}

// Invoke performs a unary RPC.
func (cc *ClientConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if cc.unaryInt != nil {
		return cc.unaryInt(ctx, method, args, reply, nil, cc.invoke, opts...)
	}
	return cc.invoke(ctx, method, args, reply, nil, opts...)
}

func (cc *ClientConn) invoke(ctx context.Context, method string, args, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) (err error) {
	sc, waited, delayed, err := cc.config(ctx)
	if err != nil {
		return err
	}
	var mc *methodConfig
	if sc != nil {
		mc = sc.methodConfig(method)
	}
	ci, err := parseCallOptions(cc.opts.callOpts, opts, mc)
	if err != nil {
		return err
	}
	ci.waitedResolver, ci.nameResolutionDelay = waited, delayed
	if len(ci.onFinish) > 0 {
		defer func() {
			for _, f := range ci.onFinish {
				f(err)
			}
		}()
	}
	if sc != nil {
		return cc.invokeConfigured(ctx, method, args, reply, &ci, sc, mc)
	}
	return cc.invokeAttempts(ctx, method, args, reply, &ci)
}

// invokeAttempts runs a unary call without a retry policy: one attempt,
// and the transparent retries of attempts the server never processed.
func (cc *ClientConn) invokeAttempts(ctx context.Context, method string, args, reply any, ci *callInfo) (err error) {
	for attempt := 0; ; attempt++ {
		if cc.stats != nil {
			err = cc.invokeOnceStats(ctx, method, args, reply, ci, attempt > 0, nil)
		} else {
			err = cc.closingErr(cc.invokeOnce(ctx, method, args, reply, ci))
		}
		// A stream the server never processed (refused, or above a
		// GOAWAY's last stream id) is retried transparently, as grpc-go
		// does.
		if err == nil || attempt >= 2 || !unprocessed(err) {
			return err
		}
	}
}

// closingErr turns the failure of a call cut short by Close into
// Canceled, as grpc-go reports it.
func (cc *ClientConn) closingErr(err error) error {
	if err != nil && err != io.EOF && cc.isClosed.Load() && status.Code(err) == codes.Unavailable {
		return errConnClosing
	}
	return err
}

// unprocessed reports whether err says the server did not process the
// stream, so that the call may run again.
func unprocessed(err error) bool {
	var he *h2conn.Error
	return status.Code(err) == codes.Unavailable && (errors.As(err, &he) && he.Unprocessed || errors.Is(err, h2conn.ErrGoingAway))
}

func (cc *ClientConn) invokeOnce(ctx context.Context, method string, args, reply any, ci *callInfo) error {
	cs, p, err := cc.openStream(ctx, method, ci, true) // the request follows at once
	if err != nil {
		return err
	}
	err = invokeStream(cs, nil, args, reply, nil)
	p.ended(cs, err)
	ci.after(cs, p.peer)
	cs.Release() // after ci.after: the stream object goes back to the connection
	return err
}

// invokeOnceStats is invokeOnce with a stats handler; res, when not nil,
// records the attempt for a retry policy.
func (cc *ClientConn) invokeOnceStats(ctx context.Context, method string, args, reply any, ci *callInfo, retry bool, res *attemptResult) error {
	cs, p, cst, err := cc.openStreamStats(ctx, method, ci, true, false, false, retry)
	if err != nil {
		return cc.closingErr(err)
	}
	err = cc.closingErr(invokeStream(cs, cst, args, reply, res))
	if res != nil {
		res.observe(cs)
	}
	p.ended(cs, err)
	cst.end(err, cs.Trailer())
	ci.after(cs, p.peer)
	cs.Release()
	return err
}

// invokeStream is a unary call's exchange on an open stream: the request,
// then exactly one response; reported to cst when it is not nil. res, when
// not nil, records the request's size for a retry policy.
func invokeStream(cs *grpcwire.ClientStream, cst *clientCallStats, args, reply any, res *attemptResult) error {
	var err error
	var n grpcwire.MsgSize
	switch {
	case cst != nil:
		n, err = cst.sendMsg(cs, args, true)
	case res != nil:
		n, err = cs.SendMsgSized(args, true)
	default:
		err = cs.SendMsg(args, true)
	}
	if res != nil {
		res.sent(n, err)
	}
	if err != nil && err != io.EOF {
		cs.Abort()
		return err
	}
	var got grpcwire.MsgSize
	if cst != nil {
		got, err = cs.RecvMsgSized(reply)
	} else {
		err = cs.RecvMsg(reply)
	}
	if err != nil {
		if err == io.EOF {
			return status.Error(codes.Unimplemented, "cardinality violation: received no response message from non-server-streaming RPC")
		}
		return err
	}
	msg, err := cs.Recv()
	if cst != nil {
		// The response is reported after the trailers that came with it
		// (taken in by the Recv above): grpc-go's reader reports them as
		// they arrive, before its caller decodes the message.
		cst.inPayload(reply, got)
	}
	if err == nil {
		msg.Free()
		cs.Abort()
		return status.Error(codes.Unimplemented, "cardinality violation: expected <EOF> for non server-streaming RPCs, but received another message")
	}
	if err == io.EOF {
		return nil
	}
	return err
}

// ended tells the balancer that the call on cs ended with err, when it
// asked to hear it.
func (p *picked) ended(cs *grpcwire.ClientStream, err error) {
	if p.done != nil {
		p.done(doneInfo(cs, err))
	}
}

// doneInfo is what a balancer hears of a call it placed when it ends.
func doneInfo(cs *grpcwire.ClientStream, err error) balancer.DoneInfo {
	if err == io.EOF {
		err = nil
	}
	h, _ := cs.Header()
	tr := cs.Trailer()
	return balancer.DoneInfo{Err: err, Trailer: tr, BytesSent: true, BytesReceived: h != nil, ServerLoad: serverLoad(tr)}
}

// after fills the Header, Trailer and Peer call options.
func (ci *callInfo) after(cs *grpcwire.ClientStream, p *peer.Peer) {
	if len(ci.headerAddrs) > 0 {
		h, _ := cs.Header()
		for _, a := range ci.headerAddrs {
			*a = h
		}
	}
	for _, a := range ci.trailerAddrs {
		*a = cs.Trailer()
	}
	if p != nil {
		for _, a := range ci.peerAddrs {
			*a = *p
		}
	}
}

// NewStream begins a streaming RPC.
func (cc *ClientConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if cc.streamInt != nil {
		return cc.streamInt(ctx, desc, nil, method, cc.newStream, opts...)
	}
	return cc.newStream(ctx, desc, nil, method, opts...)
}

func (cc *ClientConn) newStream(ctx context.Context, desc *grpc.StreamDesc, _ *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return cc.newStreamOn(ctx, desc, method, nil, opts...)
}

// newStreamOn begins a streaming RPC on the connection the picker chooses,
// or on via's when via is not nil (a producer's call: no interceptors run
// and no retry policy applies, as in grpc-go).
func (cc *ClientConn) newStreamOn(ctx context.Context, desc *grpc.StreamDesc, method string, via *subConn, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	var sc *serviceConfig
	var mc *methodConfig
	waited, delayed := false, false
	if via == nil {
		var err error
		if sc, waited, delayed, err = cc.config(ctx); err != nil {
			return nil, err
		}
		if sc != nil {
			mc = sc.methodConfig(method)
		}
	}
	ci, err := parseCallOptions(cc.opts.callOpts, opts, mc)
	if err != nil {
		return nil, err
	}
	ci.via = via
	ci.waitedResolver, ci.nameResolutionDelay = waited, delayed
	if sc != nil {
		return cc.newStreamConfigured(ctx, desc, method, &ci, sc, mc)
	}
	s := &clientStream{cc: cc, ctx: ctx, desc: desc, ci: ci}
	if err := s.openAttempt(ctx, method, false); err != nil {
		for _, f := range ci.onFinish {
			f(err)
		}
		return nil, err
	}
	return s, nil
}

// openAttempt opens an attempt of the call on ctx, the call's context, and
// makes it the stream's current one; on failure the stream keeps the
// attempt it had. transparent says it follows an attempt the server never
// processed (stats handlers are told).
func (s *clientStream) openAttempt(ctx context.Context, method string, transparent bool) error {
	cc := s.cc
	if cc.stats == nil {
		cs, p, err := cc.openStream(ctx, method, &s.ci, false)
		if err == nil {
			s.endAttempt()
			s.cs, s.peer, s.done = cs, p.peer, p.done
		}
		return err
	}
	cs, p, cst, err := cc.openStreamStats(ctx, method, &s.ci, false, s.desc.ClientStreams, s.desc.ServerStreams, transparent)
	if err != nil {
		return err
	}
	s.endAttempt()
	s.cs, s.peer, s.done, s.stats, s.ctx = cs, p.peer, p.done, cst, cst.ctx
	// The end of a stream the caller abandons after cancelling it is
	// reported without a further call, as grpc-go's watcher does.
	cst.stop = context.AfterFunc(cst.ctx, func() {
		s.finish(status.FromContextError(cst.ctx.Err()).Err())
	})
	return nil
}

// endAttempt tells the balancer that the attempt being replaced by a
// retry ended (PickResult.Done), with the error the retry was for.
func (s *clientStream) endAttempt() {
	if s.done != nil && s.cs != nil {
		_, err := s.cs.Header()
		if err == nil {
			err = errAttemptRetried
		}
		s.done(doneInfo(s.cs, err))
		s.done = nil
	}
}

// errAttemptRetried is what a balancer hears of an attempt a retry
// replaced when the attempt itself reported no error.
var errAttemptRetried = status.Error(codes.Unavailable, "grpc: the attempt was retried")

// clientStream implements grpc.ClientStream over grpcwire.ClientStream.
type clientStream struct {
	cc    *ClientConn
	cs    *grpcwire.ClientStream
	ctx   context.Context
	desc  *grpc.StreamDesc
	ci    callInfo
	peer  *peer.Peer
	done  func(balancer.DoneInfo) // the balancer's PickResult.Done, nil for none
	stats *clientCallStats        // nil without a stats handler

	// With a service config: cancel ends the context of the method
	// config's timeout (nil without one), throttler counts the call's
	// success in the ClientConn's retry throttling (nil without), and rs
	// is the retry state of a call under a retry policy (nil without).
	// Under a retry policy, cs, peer, stats and ctx change with each
	// attempt until the call commits: they are then read under rs.mu.
	cancel    context.CancelFunc
	throttler *retryThrottler
	rs        *streamRetry

	sentLast bool // CloseSend was called, or the single request of a call that is not client-streaming was sent
	recvOne  bool // !desc.ServerStreams: the response was received
	doneOnce sync.Once
}

// Header returns the response headers, or nil when there are none: when
// the call ended before them (a Trailers-Only response, a failure, the
// context) it is finished and Header returns nil, nil as grpc-go's does;
// RecvMsg reports how it ended.
func (s *clientStream) Header() (metadata.MD, error) {
	if s.rs != nil {
		if err := s.settle(); err != nil {
			s.finish(err)
			return nil, nil
		}
	}
	md, err := s.cs.Header()
	if md == nil && err == nil {
		err = io.EOF // Trailers-Only with OK
	}
	if err != nil {
		s.finish(s.cc.closingErr(err))
		return nil, nil
	}
	return md, nil
}

// Trailer returns the trailers; under a retry policy it commits the call
// to its current attempt, as grpc-go's does.
func (s *clientStream) Trailer() metadata.MD {
	if s.rs != nil {
		s.rs.commit()
	}
	return s.cs.Trailer()
}

// Context returns the call's context (with a stats handler, the one the
// handler tagged for the current attempt); under a retry policy it commits
// the call to its current attempt, as grpc-go's does.
func (s *clientStream) Context() context.Context {
	if s.rs != nil {
		s.rs.commit()
	}
	return s.ctx
}

func (s *clientStream) CloseSend() error {
	if s.sentLast {
		return nil // closed already, or the single request carried END_STREAM
	}
	s.sentLast = true
	if s.rs != nil {
		return s.closeSendRetry()
	}
	return s.cs.CloseSend()
}

func (s *clientStream) SendMsg(m any) error {
	if s.sentLast {
		// Misuse ends the call with Internal, as grpc-go's does; RecvMsg
		// reports the same error.
		err := status.Error(codes.Internal, "SendMsg called after CloseSend")
		if s.rs != nil {
			s.rs.commit()
		}
		s.cs.Fail(err)
		s.finish(err)
		return err
	}
	if !s.desc.ClientStreams {
		s.sentLast = true
		// grpc-go returns nil, not io.EOF, when the single request of a
		// call that is not client-streaming cannot be sent: the generated
		// stubs return SendMsg's error as the call's, and RecvMsg reports
		// the real status.
		if err := s.sendMsg(m, true); err != io.EOF {
			return err
		}
		return nil
	}
	return s.sendMsg(m, false)
}

func (s *clientStream) sendMsg(m any, last bool) error {
	if s.rs != nil {
		return s.sendRetry(m, last)
	}
	if s.stats == nil {
		return s.cs.SendMsg(m, last)
	}
	_, err := s.stats.sendMsg(s.cs, m, last)
	if err != nil && err != io.EOF {
		s.finish(err) // a local failure (encoding) ends the call, as in grpc-go
	}
	return err
}

func (s *clientStream) RecvMsg(m any) error {
	if s.rs != nil {
		if err := s.settle(); err != nil {
			s.finish(err)
			return err
		}
	}
	var got grpcwire.MsgSize
	var err error
	if s.stats != nil {
		got, err = s.cs.RecvMsgSized(m)
	} else {
		err = s.cs.RecvMsg(m)
	}
	err = s.cc.closingErr(err)
	if err == nil && s.stats != nil && s.desc.ServerStreams {
		s.stats.inPayload(m, got)
	}
	if err == nil && !s.desc.ServerStreams {
		// A unary response: the status must follow. Its message is
		// reported after the trailers that came with it, as in
		// invokeStream.
		s.recvOne = true
		msg, err2 := s.cs.Recv()
		if s.stats != nil {
			s.stats.inPayload(m, got)
		}
		switch {
		case err2 == nil:
			msg.Free()
			s.cs.Abort()
			err = status.Error(codes.Unimplemented, "cardinality violation: expected <EOF> for non server-streaming RPCs, but received another message")
		case err2 == io.EOF:
			s.finish(nil)
			return nil
		default:
			err = err2
		}
	}
	if err != nil {
		if err == io.EOF && !s.desc.ServerStreams && !s.recvOne {
			err = status.Error(codes.Unimplemented, "cardinality violation: received no response message from non-server-streaming RPC")
		}
		if err == io.EOF {
			s.finish(nil)
		} else {
			s.finish(err)
		}
	}
	return err
}

// finish runs the call's after-work once: the Header, Trailer and Peer
// call options and the OnFinish callbacks (with nil for io.EOF, a clean
// end).
func (s *clientStream) finish(err error) {
	if err == io.EOF {
		err = nil
	}
	s.doneOnce.Do(func() {
		if s.rs != nil {
			s.rs.commit() // the attempt is the call's last
		}
		if s.done != nil {
			s.done(doneInfo(s.cs, err))
		}
		if s.stats != nil {
			s.stats.end(err, s.cs.Trailer())
		}
		s.ci.after(s.cs, s.peer)
		for _, f := range s.ci.onFinish {
			f(err)
		}
		if err == nil {
			s.throttler.success()
		}
		if s.cancel != nil {
			s.cancel()
		}
	})
}

var (
	_ grpc.ClientConnInterface = (*ClientConn)(nil)
	_ grpc.ClientStream        = (*clientStream)(nil)
)
