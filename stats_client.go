package leangrpc

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
)

// beginConnStats tags a new client connection and reports its start, and
// its end once it ends: with a stats handler each client connection has a
// goroutine waiting for that (grpc-go reports the end from its transport's
// close; leangrpc's engine has no hook a client connection could use
// without a cost to every connection). Close reports the end of the
// connections it closes itself, before it returns, as grpc-go's does, so
// that a program that closes its ClientConn and exits still sees them.
func (cc *ClientConn) beginConnStats(conn *h2conn.Conn, local, remote net.Addr) {
	sh := cc.stats
	ctx := sh.TagConn(context.Background(), &stats.ConnTagInfo{RemoteAddr: remote, LocalAddr: local})
	sh.HandleConn(ctx, &stats.ConnBegin{Client: true})
	e := &connEnd{sh: sh, ctx: ctx}
	cc.mu.Lock()
	if cc.connEnds == nil {
		cc.connEnds = make(map[*h2conn.Conn]*connEnd)
	}
	cc.connEnds[conn] = e
	cc.mu.Unlock()
	go func() {
		<-conn.Done()
		cc.endConnStats(conn)
	}()
}

// connEnd reports one connection's ConnEnd, once.
type connEnd struct {
	sh   stats.Handler
	ctx  context.Context // TagConn's
	once sync.Once
}

// endConnStats reports conn's ConnEnd unless it was reported already; it
// returns once the report is made, whoever makes it.
func (cc *ClientConn) endConnStats(conn *h2conn.Conn) {
	cc.mu.Lock()
	e := cc.connEnds[conn]
	cc.mu.Unlock()
	if e == nil {
		return // reported and forgotten
	}
	e.once.Do(func() { e.sh.HandleConn(e.ctx, &stats.ConnEnd{Client: true}) })
	cc.mu.Lock()
	delete(cc.connEnds, conn)
	cc.mu.Unlock()
}

// clientCallStats is one attempt of a client call as stats handlers see
// it, allocated only when the ClientConn has a stats handler. Like
// grpc-go, leangrpc tags and begins each attempt (a transparent retry is a
// new attempt) and ends each one.
type clientCallStats struct {
	sh       stats.Handler
	ctx      context.Context // TagRPC's: the call's requests go out with its metadata
	begin    time.Time
	failFast bool
	ended    bool
	// compressor is the call's grpc.UseCompressor, named in OutHeader.
	compressor string
	// stop ends the watch a stream keeps on its context so that a
	// cancellation is reported without a further call; nil if none.
	stop func() bool
}

// beginClientCall tags an attempt and reports its beginning.
func (cc *ClientConn) beginClientCall(ctx context.Context, method string, ci *callInfo, clientStream, serverStream, retry bool) *clientCallStats {
	c := &clientCallStats{sh: cc.stats, failFast: !ci.waitForReady, begin: time.Now(), compressor: ci.compressor}
	c.ctx = c.sh.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method, FailFast: c.failFast, NameResolutionDelay: ci.nameResolutionDelay})
	c.sh.HandleRPC(c.ctx, &stats.Begin{
		Client: true, BeginTime: c.begin, FailFast: c.failFast,
		IsClientStream: clientStream, IsServerStream: serverStream,
		IsTransparentRetryAttempt: retry,
	})
	return c
}

// delayedPick reports that the call waited for a connection, what grpc-go
// reports when its pick was queued until a connection was ready.
func (c *clientCallStats) delayedPick() {
	c.sh.HandleRPC(c.ctx, &stats.DelayedPickComplete{})
}

// outHeader reports the request headers: as in grpc-go, the outgoing
// metadata of the (tagged) context with the user-agent, not the
// per-RPC credentials' metadata.
func (c *clientCallStats) outHeader(cc *ClientConn, method string, p *peer.Peer) {
	md, ok := metadata.FromOutgoingContext(c.ctx) // a copy
	if !ok {
		md = metadata.MD{}
	}
	md.Set("user-agent", cc.userAgent)
	h := &stats.OutHeader{Client: true, FullMethod: method, Header: md, Authority: cc.authority, Compression: c.compressor}
	if p != nil {
		h.RemoteAddr, h.LocalAddr = p.Addr, p.LocalAddr
	}
	c.sh.HandleRPC(c.ctx, h)
}

// sendMsg sends m on cs and reports it.
func (c *clientCallStats) sendMsg(cs *grpcwire.ClientStream, m any, last bool) (grpcwire.MsgSize, error) {
	n, err := cs.SendMsgSized(m, last)
	if err == nil {
		c.sh.HandleRPC(c.ctx, &stats.OutPayload{
			Client: true, Payload: m, Length: n.Len, CompressedLength: n.Wire, WireLength: n.Wire + grpcwire.PrefixLen, SentTime: time.Now(),
		})
	}
	return n, err
}

// inPayload reports m, received with size n.
func (c *clientCallStats) inPayload(m any, n grpcwire.MsgSize) {
	c.sh.HandleRPC(c.ctx, &stats.InPayload{
		Client: true, Payload: m, Length: n.Len, CompressedLength: n.Wire, WireLength: n.Wire + grpcwire.PrefixLen, RecvTime: time.Now(),
	})
}

// ResponseHeader is grpcwire.ResponseObserver's: the response headers.
func (c *clientCallStats) ResponseHeader(md metadata.MD, encoding string, wireLength int) {
	c.sh.HandleRPC(c.ctx, &stats.InHeader{Client: true, Header: md.Copy(), Compression: encoding, WireLength: wireLength})
}

// ResponseTrailer is grpcwire.ResponseObserver's: the trailers.
func (c *clientCallStats) ResponseTrailer(md metadata.MD, wireLength int) {
	c.sh.HandleRPC(c.ctx, &stats.InTrailer{Client: true, Trailer: md.Copy(), WireLength: wireLength})
}

// end reports the attempt's end once, with the call's result (nil for
// success) and the trailers received, if any.
func (c *clientCallStats) end(err error, trailer metadata.MD) {
	if c.ended {
		return
	}
	c.ended = true
	if c.stop != nil {
		c.stop()
	}
	c.sh.HandleRPC(c.ctx, &stats.End{
		Client: true, BeginTime: c.begin, EndTime: time.Now(), Trailer: trailer, Error: errorOf(err),
	})
}
