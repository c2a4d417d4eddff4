package grpcwire

import (
	"slices"
	"sync/atomic"

	"google.golang.org/grpc/metadata"
)

// MDCache lets the calls of one connection share their incoming metadata
// map while their metadata fields are the same, as they are for most
// clients (their user-agent, :authority and content-type, call after
// call): building the map was three allocations per call.
//
// Sharing is safe because nothing hands a handler the map itself:
// grpc-go's metadata.FromIncomingContext and ValueFromIncomingContext
// copy what they return, stats handlers get a copy (InHeader), and
// leangrpc never writes to an incoming map. The zero value is ready; its
// methods may be called from any goroutine.
type MDCache struct {
	last atomic.Pointer[mdEntry]
}

// mdEntry is one map with the fields it was built from; never modified.
type mdEntry struct {
	pairs []string
	md    metadata.MD
}

// get returns the map of r's metadata fields: the cached one when they
// are the same as its, else a new one, which is cached.
func (c *MDCache) get(r *Request) metadata.MD {
	if e := c.last.Load(); e != nil && slices.Equal(e.pairs, r.mdPairs) {
		return e.md
	}
	md := r.BuildMD()
	// r.mdPairs is the call's scratch; the entry keeps its own.
	c.last.Store(&mdEntry{pairs: slices.Clone(r.mdPairs), md: md})
	return md
}
