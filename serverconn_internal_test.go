package leangrpc

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// valueCtx answers Value for one key only, as serverConn and rpc do.
type valueCtx struct {
	context.Context
	key, val any
}

func (c valueCtx) Value(key any) any {
	if key == c.key {
		return c.val
	}
	return nil
}

// TestGrpcGoContextKeys guards the probes in server.go (probeKey): the
// handler's context answers grpc-go's peer, metadata and
// ServerTransportStream lookups under keys learned by watching grpc-go's
// own getters, which saves context.WithValue allocations on every call.
// The keys are grpc-go's private details: if a grpc-go upgrade changes
// what its getters look up, or the type they expect under it, this test
// fails and names the version, and server.go's probes must be revisited
// (the fallback through grpc-go's public constructors is correct but
// costs those allocations).
func TestGrpcGoContextKeys(t *testing.T) {
	broken := func(format string, args ...any) {
		t.Helper()
		t.Errorf("grpc-go %s: "+format+"; server.go's context-key probes (probeKey) no longer match this grpc-go version", append([]any{grpc.Version}, args...)...)
	}
	if peerCtxKey == nil || mdCtxKey == nil || stsCtxKey == nil {
		broken("a key was not learned (peer %v, metadata %v, transport stream %v)", peerCtxKey, mdCtxKey, stsCtxKey)
		return
	}
	if !ctxKeysLearned {
		broken("the metadata and transport-stream probes learned the same key %v", mdCtxKey)
	}
	bg := context.Background()

	// The keys are those grpc-go's public constructors store under, and
	// the values have the type they store.
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}
	if got := peer.NewContext(bg, p).Value(peerCtxKey); got != p {
		broken("peer.NewContext stores %v under another key or type (%T under the learned key)", p, got)
	}
	md := metadata.Pairs("k", "v")
	v := metadata.NewIncomingContext(bg, md).Value(mdCtxKey)
	if got, ok := v.(metadata.MD); !ok || len(got["k"]) != 1 || got["k"][0] != "v" {
		broken("metadata.NewIncomingContext stores its MD under another key or type (%T %v under the learned key)", v, v)
	}
	sts := &transportStream{}
	if got := grpc.NewContextWithServerTransportStream(bg, sts).Value(stsCtxKey); got != grpc.ServerTransportStream(sts) {
		broken("grpc.NewContextWithServerTransportStream stores its stream under another key or type (%T under the learned key)", got)
	}

	// And grpc-go's getters read a context that answers only the learned
	// key, as serverConn and rpc are.
	if got, ok := peer.FromContext(valueCtx{bg, peerCtxKey, p}); !ok || got != p {
		broken("peer.FromContext does not read the learned key")
	}
	if got, ok := metadata.FromIncomingContext(valueCtx{bg, mdCtxKey, md}); !ok || len(got.Get("k")) != 1 {
		broken("metadata.FromIncomingContext does not read the learned key")
	}
	if got := grpc.ServerTransportStreamFromContext(valueCtx{bg, stsCtxKey, sts}); got != grpc.ServerTransportStream(sts) {
		broken("grpc.ServerTransportStreamFromContext does not read the learned key")
	}

	if k := probeKey(func(context.Context) { panic("a lookup that fails") }); k != nil {
		t.Fatalf("probeKey of a panicking lookup = %v, want nil", k)
	}
}

// The connection's context is the serverConn itself: peer.FromContext finds
// the peer in it and in contexts derived from it, it is never done, and a
// call context derived from it is canceled on its own.
func TestServerConnContext(t *testing.T) {
	if peerCtxKey == nil {
		t.Skip("the peer key was not learned (TestGrpcGoContextKeys says why)")
	}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}
	sc := &serverConn{peer: peer.Peer{Addr: addr}}
	ctx := sc.context()
	if ctx != context.Context(sc) {
		t.Fatal("the connection's context is not the serverConn")
	}
	if p, ok := peer.FromContext(ctx); !ok || p.Addr != addr {
		t.Fatalf("peer.FromContext = %v, %v; want the conn's peer", p, ok)
	}
	if ctx.Done() != nil || ctx.Err() != nil {
		t.Fatal("the connection's context can be done")
	}
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("the connection's context has a deadline")
	}
	call, cancel := context.WithTimeout(metadata.NewIncomingContext(ctx, metadata.Pairs("k", "v")), time.Hour)
	if p, ok := peer.FromContext(call); !ok || p.Addr != addr {
		t.Fatalf("derived context: peer.FromContext = %v, %v", p, ok)
	}
	if md, _ := metadata.FromIncomingContext(call); md.Get("k")[0] != "v" {
		t.Fatal("derived context lost its metadata")
	}
	cancel()
	if call.Err() != context.Canceled || ctx.Err() != nil {
		t.Fatalf("after cancel: call %v, conn %v", call.Err(), ctx.Err())
	}
	if ctx.Value("other") != nil {
		t.Fatal("the connection's context holds an unknown key")
	}
}
