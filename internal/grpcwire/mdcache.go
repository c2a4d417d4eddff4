package grpcwire

import (
	"hash/maphash"
	"slices"
	"sync/atomic"

	"google.golang.org/grpc/metadata"
)

// MDCache lets calls share their incoming metadata map while their
// metadata fields are the same, as they are for most clients (their
// user-agent, :authority and content-type, call after call): building the
// map was three allocations per call.
//
// It is a server's, not a connection's: a connection's cache would keep
// its last map (half a KiB) for as long as the connection idles, where an
// idle connection costs about 4 KB in all. A few slots, picked by a hash
// of the fields, keep the maps of as many kinds of client at once; more
// kinds than that share slots and build their maps as before.
//
// Sharing is safe because nothing hands a handler the map itself:
// grpc-go's metadata.FromIncomingContext and ValueFromIncomingContext copy
// what they return, stats handlers get a copy (InHeader), and leangrpc
// never writes to an incoming map. The zero value is ready; its methods
// may be called from any goroutine.
type MDCache struct {
	slots [mdCacheSlots]atomic.Pointer[mdEntry]
}

// mdCacheSlots is how many field sets an MDCache keeps at once.
const mdCacheSlots = 8

// mdEntry is one map with the fields it was built from; never modified.
type mdEntry struct {
	pairs []string
	md    metadata.MD
}

var mdSeed = maphash.MakeSeed()

// get returns the map of r's metadata fields: the cached one when they
// are the same as its, else a new one, which is cached.
func (c *MDCache) get(r *Request) metadata.MD {
	var h maphash.Hash
	h.SetSeed(mdSeed)
	for _, s := range r.mdPairs {
		h.WriteString(s)
		h.WriteByte(0)
	}
	slot := &c.slots[h.Sum64()%mdCacheSlots]
	if e := slot.Load(); e != nil && slices.Equal(e.pairs, r.mdPairs) {
		return e.md
	}
	md := r.BuildMD()
	// r.mdPairs is the call's scratch; the entry keeps its own.
	slot.Store(&mdEntry{pairs: slices.Clone(r.mdPairs), md: md})
	return md
}
