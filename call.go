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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
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
	headerAddrs  []*metadata.MD
	trailerAddrs []*metadata.MD
	peerAddrs    []*peer.Peer
	onFinish     []func(error)
	authority    string
	perRPC       credentials.PerRPCCredentials
}

// parseCallOptions reads grpc-go's exported call options. Options it does
// not know (grpc-go's unexported ones) are ignored, except compression,
// which is refused until leangrpc supports it.
func parseCallOptions(defaults, opts []grpc.CallOption) (callInfo, error) {
	var ci callInfo
	for _, list := range [2][]grpc.CallOption{defaults, opts} {
		for _, o := range list {
			switch o := o.(type) {
			case grpc.FailFastCallOption:
				ci.waitForReady = !o.FailFast
			case *grpc.FailFastCallOption:
				ci.waitForReady = !o.FailFast
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
				ci.codec = o.CodecV2
			case grpc.ForceCodecCallOption:
				ci.codec = codecV1Adapter{o.Codec}
			case grpc.AuthorityOverrideCallOption:
				ci.authority = o.Authority
			case grpc.PerRPCCredsCallOption:
				ci.perRPC = o.Creds
			case grpc.CompressorCallOption:
				if o.CompressorType != "" && o.CompressorType != "identity" {
					return ci, status.Errorf(codes.Unimplemented, "leangrpc: compression (%q) is not supported yet", o.CompressorType)
				}
			}
		}
	}
	if ci.codec == nil {
		if ci.subtype == "" {
			ci.codec = grpcwire.ProtoCodec()
		} else if c := encoding.GetCodecV2(ci.subtype); c != nil {
			ci.codec = c
		} else {
			return ci, status.Errorf(codes.Internal, "no codec registered for content-subtype %s", ci.subtype)
		}
	} else if ci.subtype == "" {
		ci.subtype = ci.codec.Name()
	}
	if ci.maxRecv == 0 {
		ci.maxRecv = grpcwire.DefaultMaxRecvMsgSize
	}
	return ci, nil
}

// codecV1Adapter runs an old-style encoding.Codec as a CodecV2.
type codecV1Adapter struct{ c encoding.Codec }

func (a codecV1Adapter) Name() string { return a.c.Name() }

func (a codecV1Adapter) Marshal(v any) (mem.BufferSlice, error) {
	b, err := a.c.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (a codecV1Adapter) Unmarshal(data mem.BufferSlice, v any) error {
	return a.c.Unmarshal(data.Materialize(), v)
}

// newRequest builds the request headers of a call.
func (cc *ClientConn) newRequest(ctx context.Context, method string, ci *callInfo) (grpcwire.Request, error) {
	if err := grpcwire.CheckOutgoingMD(ctx); err != nil {
		return grpcwire.Request{}, err // before anything is sent, as grpc-go
	}
	req := grpcwire.Request{
		Method:         method,
		Authority:      cc.authority,
		Scheme:         cc.scheme,
		ContentSubtype: ci.subtype,
		UserAgent:      cc.userAgent,
	}
	if ci.authority != "" {
		req.Authority = ci.authority
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		req.MD = md
	}
	if len(cc.opts.perRPC) > 0 || ci.perRPC != nil {
		if err := cc.addPerRPCCreds(ctx, &req, ci); err != nil {
			return req, err
		}
	}
	return req, nil
}

// addPerRPCCreds adds the metadata of the connection's and the call's
// per-RPC credentials to the request, as grpc-go does.
func (cc *ClientConn) addPerRPCCreds(ctx context.Context, req *grpcwire.Request, ci *callInfo) error {
	service, _, _ := grpcwire.SplitMethod(req.Method)
	audience := "https://" + req.Authority + "/" + service
	creds := cc.opts.perRPC
	if ci.perRPC != nil {
		creds = append(creds[:len(creds):len(creds)], ci.perRPC)
	}
	md := req.MD.Copy()
	if md == nil {
		md = metadata.MD{}
	}
	for _, c := range creds {
		if c.RequireTransportSecurity() && cc.scheme != "https" {
			return status.Error(codes.Unauthenticated, "transport: cannot send secure credentials on an insecure connection")
		}
		kv, err := c.GetRequestMetadata(ctx, audience)
		if err != nil {
			if _, ok := status.FromError(err); ok {
				return err
			}
			return status.Errorf(codes.Unauthenticated, "transport: per-RPC creds failed due to error: %v", err)
		}
		for k, v := range kv {
			k = strings.ToLower(k)
			md[k] = append(md[k], v)
		}
	}
	req.MD = md
	return nil
}

// openStream gets a connection and opens the call's stream on it, once
// retrying on a fresh connection when the first was going away (nothing
// was sent then).
func (cc *ClientConn) openStream(ctx context.Context, method string, ci *callInfo, hold bool) (*grpcwire.ClientStream, *peer.Peer, error) {
	// A context that already ended fails the call before anything is
	// sent, as grpc-go's does; otherwise a fast server could answer before
	// the stream's wait notices the context.
	if err := ctx.Err(); err != nil {
		return nil, nil, status.FromContextError(err).Err()
	}
	req, err := cc.newRequest(ctx, method, ci)
	if err != nil {
		return nil, nil, err
	}
	cfg := grpcwire.ClientConfig{Pool: cc.pool, Codec: ci.codec, MaxRecv: ci.maxRecv, MaxSend: ci.maxSend,
		// A unary call shows metadata only through the Header and
		// Trailer call options.
		NoMetadata: hold && len(ci.headerAddrs) == 0 && len(ci.trailerAddrs) == 0,
		// Only Invoke holds the request headers, and it waits in the
		// stream's calls from start to end.
		Unary: hold}
	for attempt := 0; ; attempt++ {
		conn, p, err := cc.getConn(ctx, ci.waitForReady)
		if err != nil {
			return nil, nil, err
		}
		var cs *grpcwire.ClientStream
		if hold {
			cs, err = grpcwire.NewClientStreamHold(ctx, conn, &req, cfg)
		} else {
			cs, err = grpcwire.NewClientStream(ctx, conn, &req, cfg)
		}
		if err == nil {
			return cs, p, nil
		}
		if attempt < 2 && retryable(err) {
			cc.dropConn(conn)
			continue
		}
		return nil, nil, err
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
	ci, err := parseCallOptions(cc.opts.callOpts, opts)
	if err != nil {
		return err
	}
	if len(ci.onFinish) > 0 {
		defer func() {
			for _, f := range ci.onFinish {
				f(err)
			}
		}()
	}
	for attempt := 0; ; attempt++ {
		err = cc.closingErr(cc.invokeOnce(ctx, method, args, reply, &ci))
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
	defer cs.Release() // after ci.after: the stream object goes back to the connection
	defer ci.after(cs, p)
	if err := cs.SendMsg(args, true); err != nil && err != io.EOF {
		cs.Abort()
		return err
	}
	if err := cs.RecvMsg(reply); err != nil {
		if err == io.EOF {
			return status.Error(codes.Internal, "cardinality violation: received no response message from non-server-streaming RPC")
		}
		return err
	}
	msg, err := cs.Recv()
	if err == nil {
		msg.Free()
		cs.Abort()
		return status.Error(codes.Internal, "cardinality violation: expected <EOF> for non server-streaming RPCs, but received another message")
	}
	if err == io.EOF {
		return nil
	}
	return err
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
	ci, err := parseCallOptions(cc.opts.callOpts, opts)
	if err != nil {
		return nil, err
	}
	cs, p, err := cc.openStream(ctx, method, &ci, false)
	if err != nil {
		for _, f := range ci.onFinish {
			f(err)
		}
		return nil, err
	}
	s := &clientStream{cc: cc, cs: cs, ctx: ctx, desc: desc, ci: ci, peer: p}
	return s, nil
}

// clientStream implements grpc.ClientStream over grpcwire.ClientStream.
type clientStream struct {
	cc   *ClientConn
	cs   *grpcwire.ClientStream
	ctx  context.Context
	desc *grpc.StreamDesc
	ci   callInfo
	peer *peer.Peer

	sentLast bool // CloseSend was called, or the single request of a call that is not client-streaming was sent
	recvOne  bool // !desc.ServerStreams: the response was received
	doneOnce sync.Once
}

// Header returns the response headers, or nil when there are none: when
// the call ended before them (a Trailers-Only response, a failure, the
// context) it is finished and Header returns nil, nil as grpc-go's does;
// RecvMsg reports how it ended.
func (s *clientStream) Header() (metadata.MD, error) {
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

func (s *clientStream) Trailer() metadata.MD     { return s.cs.Trailer() }
func (s *clientStream) Context() context.Context { return s.ctx }

func (s *clientStream) CloseSend() error {
	if s.sentLast {
		return nil // closed already, or the single request carried END_STREAM
	}
	s.sentLast = true
	return s.cs.CloseSend()
}

func (s *clientStream) SendMsg(m any) error {
	if s.sentLast {
		// Misuse ends the call with Internal, as grpc-go's does; RecvMsg
		// reports the same error.
		err := status.Error(codes.Internal, "SendMsg called after CloseSend")
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
		if err := s.cs.SendMsg(m, true); err != io.EOF {
			return err
		}
		return nil
	}
	return s.cs.SendMsg(m, false)
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.cc.closingErr(s.cs.RecvMsg(m))
	if err == nil && !s.desc.ServerStreams {
		// A unary response: the status must follow.
		s.recvOne = true
		msg, err2 := s.cs.Recv()
		switch {
		case err2 == nil:
			msg.Free()
			s.cs.Abort()
			err = status.Error(codes.Internal, "cardinality violation: expected <EOF> for non server-streaming RPCs, but received another message")
		case err2 == io.EOF:
			s.finish(nil)
			return nil
		default:
			err = err2
		}
	}
	if err != nil {
		if err == io.EOF && !s.desc.ServerStreams && !s.recvOne {
			err = status.Error(codes.Internal, "cardinality violation: received no response message from non-server-streaming RPC")
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
		s.ci.after(s.cs, s.peer)
		for _, f := range s.ci.onFinish {
			f(err)
		}
	})
}

var (
	_ grpc.ClientConnInterface = (*ClientConn)(nil)
	_ grpc.ClientStream        = (*clientStream)(nil)
)
