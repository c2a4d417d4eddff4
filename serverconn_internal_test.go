package leangrpc

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// The connection's context is the serverConn itself: peer.FromContext finds
// the peer in it and in contexts derived from it, it is never done, and a
// call context derived from it is canceled on its own.
func TestServerConnContext(t *testing.T) {
	if peerCtxKey == nil {
		t.Fatal("the peer package's context key was not learned: every connection pays for a context.WithValue")
	}
	if !ctxKeysLearned {
		t.Fatal("the metadata and ServerTransportStream keys were not learned: every call pays for two context.WithValue")
	}
	if k := probeKey(func(context.Context) { panic("a lookup that fails") }); k != nil {
		t.Fatalf("probeKey of a panicking lookup = %v, want nil", k)
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
