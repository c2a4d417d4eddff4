package leangrpc

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// This file reports a call's life to grpc-go stats.Handlers (OpenTelemetry's
// otelgrpc, Prometheus middleware, ...) with the events, the order and the
// fields grpc-go v1.85 gives them. Without a handler the server and client
// hold a nil stats.Handler and every report site is one nil check.
//
// Where leangrpc differs: the client reports InHeader and
// InTrailer when the caller takes the headers and trailers in, not when
// they arrive (grpc-go's reader goroutine reports them as frames come, so
// their place among the caller's events is a race there; for a response
// that is one message, leangrpc reports the trailers before the message,
// the order grpc-go's race mostly gives); and
// DelayedPickComplete is reported when a call waited for a connection to
// be dialed, leangrpc's counterpart of grpc-go's queued pick.

// StatsHandler adds a stats handler to the server. Several may be added;
// each sees every event, in the order they were added, and each Tag call
// gets the context the previous one returned, as in grpc-go. A nil handler
// is ignored.
func StatsHandler(h stats.Handler) ServerOption {
	return serverOptionFunc(func(o *serverOptions) {
		if h != nil {
			o.statsHandlers = append(o.statsHandlers, h)
		}
	})
}

// WithStatsHandler adds a stats handler to the client, with StatsHandler's
// rules. grpc-go has no per-call stats handler, and neither has leangrpc.
func WithStatsHandler(h stats.Handler) DialOption {
	return dialOptionFunc(func(o *dialOptions) {
		if h != nil {
			o.statsHandlers = append(o.statsHandlers, h)
		}
	})
}

// combineStats returns nil for no handler, the handler itself for one, and
// a fan-out for several, so that the common cases cost no extra call.
func combineStats(hs []stats.Handler) stats.Handler {
	switch len(hs) {
	case 0:
		return nil
	case 1:
		return hs[0]
	}
	return statsFanOut(append([]stats.Handler(nil), hs...))
}

// statsFanOut hands every event to each handler in turn; a Tag call's
// context goes through the handlers like a chain, and the events that
// follow see the last one's context.
type statsFanOut []stats.Handler

func (f statsFanOut) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	for _, h := range f {
		ctx = h.TagRPC(ctx, info)
	}
	return ctx
}

func (f statsFanOut) HandleRPC(ctx context.Context, s stats.RPCStats) {
	for _, h := range f {
		h.HandleRPC(ctx, s)
	}
}

func (f statsFanOut) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	for _, h := range f {
		ctx = h.TagConn(ctx, info)
	}
	return ctx
}

func (f statsFanOut) HandleConn(ctx context.Context, s stats.ConnStats) {
	for _, h := range f {
		h.HandleConn(ctx, s)
	}
}

// errorOf is what an End event carries for a call's result: nil for
// success (io.EOF included), else a status error.
func errorOf(err error) error {
	if err == nil || err == io.EOF {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.FromContextError(err).Err()
}

// The server side.

// connStats is a server connection's context as TagConn returned it; the
// calls on the connection derive their contexts from it.
type connStats struct {
	ctx context.Context
}

// beginConnStats tags a server connection and reports its start.
func (sc *serverConn) beginConnStats(sh stats.Handler) {
	ctx := sh.TagConn(sc.context(), &stats.ConnTagInfo{RemoteAddr: sc.peer.Addr, LocalAddr: sc.peer.LocalAddr})
	sc.stats = &connStats{ctx: ctx}
	sh.HandleConn(ctx, &stats.ConnBegin{})
}

// serverCallStats is one server call's reporting state, allocated only
// when the server has a stats handler.
type serverCallStats struct {
	sh    stats.Handler
	ctx   context.Context // TagRPC's: what the handler and every event see
	begin time.Time
	began bool // Begin was reported, so End is due
}

// tagServerCall tags the call and reports its request headers, as grpc-go
// does before it looks up the method; the context given to TagRPC already
// holds the incoming metadata and the peer (otelgrpc takes the caller's
// trace context from there).
func tagServerCall(sh stats.Handler, ctx context.Context, ss *grpcwire.ServerStream) *serverCallStats {
	method := ss.Req.Method
	var local, remote net.Addr
	if p, ok := peer.FromContext(ctx); ok {
		local, remote = p.LocalAddr, p.Addr
	}
	ctx = sh.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method})
	sh.HandleRPC(ctx, &stats.InHeader{
		FullMethod:  method,
		RemoteAddr:  remote,
		LocalAddr:   local,
		Compression: ss.Req.Encoding,
		WireLength:  ss.RequestWireLength(),
		Header:      ss.IncomingMD().Copy(), // grpc-go's is a copy too
	})
	return &serverCallStats{sh: sh, ctx: ctx}
}

// beginCall reports that the handler is about to run.
func (c *serverCallStats) beginCall(clientStream, serverStream bool) {
	c.begin = time.Now()
	c.began = true
	c.sh.HandleRPC(c.ctx, &stats.Begin{BeginTime: c.begin, IsClientStream: clientStream, IsServerStream: serverStream})
}

// sendMsg sends m and reports the response headers if they went with it,
// then the message.
func (c *serverCallStats) sendMsg(ss *grpcwire.ServerStream, m any, last bool) error {
	n, sentHeader, err := ss.SendMsgSized(m, last)
	if sentHeader {
		c.outHeader(ss)
	}
	if err == nil {
		c.sh.HandleRPC(c.ctx, &stats.OutPayload{
			Payload: m, Length: n.Len, CompressedLength: n.Wire, WireLength: n.Wire + grpcwire.PrefixLen, SentTime: time.Now(),
		})
	}
	return err
}

// sendHeader sends the response headers and reports them.
func (c *serverCallStats) sendHeader(ss *grpcwire.ServerStream, md metadata.MD) error {
	err := ss.SendHeader(md)
	if err == nil {
		c.outHeader(ss)
	}
	return err
}

func (c *serverCallStats) outHeader(ss *grpcwire.ServerStream) {
	c.sh.HandleRPC(c.ctx, &stats.OutHeader{Header: ss.HeaderMD(), Compression: ss.SendEncoding()})
}

// recvMsg receives into m and reports the message.
func (c *serverCallStats) recvMsg(ss *grpcwire.ServerStream, m any) error {
	n, err := ss.RecvMsgSized(m)
	if err == nil {
		c.sh.HandleRPC(c.ctx, &stats.InPayload{
			Payload: m, Length: n.Len, CompressedLength: n.Wire, WireLength: n.Wire + grpcwire.PrefixLen, RecvTime: time.Now(),
		})
	}
	return err
}

// finish sends the status and reports the headers if they went out
// separately, the trailers if they went out at all (not after a reset or
// the deadline, as in grpc-go), and the end of the call if it began.
func (c *serverCallStats) finish(ss *grpcwire.ServerStream, st *status.Status) {
	sentHeader, sentStatus, _ := ss.FinishSized(st)
	if sentHeader {
		c.outHeader(ss)
	}
	if sentStatus {
		c.sh.HandleRPC(c.ctx, &stats.OutTrailer{Trailer: ss.TrailerMD()})
	}
	if c.began {
		end := &stats.End{BeginTime: c.begin, EndTime: time.Now()}
		if st.Code() != codes.OK {
			end.Error = st.Err()
		}
		c.sh.HandleRPC(c.ctx, end)
	}
}
