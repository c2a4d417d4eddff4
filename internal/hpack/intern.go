package hpack

import (
	"hash/maphash"
	"sync"
)

// vocabulary lists the names and values that gRPC over HTTP/2 sends over and
// over. A decoded literal equal to one of them (or to a static table string)
// is returned as the stored string instead of a new allocation.
var vocabulary = []string{
	// Pseudo-headers and their usual values.
	":authority", ":method", ":path", ":scheme", ":status",
	"GET", "POST", "PUT", "http", "https", "/",
	"200", "204", "206", "304", "400", "404", "500",
	// gRPC request and response headers.
	"content-type", "application/grpc", "application/grpc+proto",
	"application/grpc+json", "te", "trailers", "user-agent",
	"grpc-timeout", "grpc-encoding", "grpc-accept-encoding",
	"grpc-message-type", "grpc-status", "grpc-message",
	"grpc-status-details-bin", "grpc-previous-rpc-attempts",
	"grpc-retry-pushback-ms", "grpc-trace-bin", "grpc-tags-bin",
	"identity", "gzip", "deflate", "snappy", "zstd",
	"identity,gzip", "identity,deflate,gzip", "gzip,deflate", "gzip, deflate",
	// grpc-status values "0".."16".
	"0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
	"10", "11", "12", "13", "14", "15", "16",
	// Other common headers.
	"accept-encoding", "content-length", "date", "server", "host",
	"traceparent", "tracestate", "authorization", "x-request-id",
}

// internTable maps each vocabulary and static table string to itself. It is
// built at init and read-only afterwards.
var internTable = func() map[string]string {
	m := make(map[string]string, len(vocabulary)+2*staticLen)
	for _, s := range vocabulary {
		m[s] = s
	}
	for _, f := range staticTable[1:] {
		m[f.Name] = f.Name
		if f.Value != "" {
			m[f.Value] = f.Value
		}
	}
	return m
}()

// maxInternLen is the length of the longest interned string: longer input
// is not hashed for a lookup that cannot succeed.
var maxInternLen = func() int {
	n := 0
	for s := range internTable {
		n = max(n, len(s))
	}
	return n
}()

// intern returns the stored string equal to b, if any. The conversion in the
// map index does not allocate.
func intern(b []byte) (string, bool) {
	if len(b) > maxInternLen {
		return "", false
	}
	s, ok := internTable[string(b)]
	return s, ok
}

// shared returns s, or an equal string already stored by some decoder: a
// vocabulary string, or the copy in sharedCache. The decoder stores its
// dynamic table entries this way, since a peer indexes the values it
// repeats (its :authority, user-agent, the paths it calls), and the
// connections of one client all repeat the same ones: the tables of idle
// connections then pin one copy between them, not one each.
//
// The cache is small, direct-mapped and bounded (sharedSlots strings of at
// most sharedMaxLen bytes), so a peer indexing ever new strings costs a
// hash and a slot overwrite per string, no allocation, and pins at most
// sharedSlots·sharedMaxLen bytes process-wide; a unique.Make per string
// allocates several times per string, which such a peer would turn into
// a decoder many times slower than x/net's (PERFORMANCE.md, "Interning of
// decoded strings"; TestDecoderDistinctIndexedStringsCost).
func shared(s string) string {
	if len(s) == 0 {
		return ""
	}
	if v, ok := internTable[s]; ok {
		return v
	}
	if len(s) > sharedMaxLen {
		return s
	}
	slot := &sharedCache[maphash.String(sharedSeed, s)%sharedSlots]
	slot.mu.Lock()
	if slot.s == s {
		s = slot.s
	} else {
		slot.s = s
	}
	slot.mu.Unlock()
	return s
}

const (
	sharedSlots  = 512
	sharedMaxLen = 256
)

// sharedSlot is one entry of sharedCache; s is guarded by mu.
type sharedSlot struct {
	mu sync.Mutex
	s  string
}

var (
	sharedSeed  = maphash.MakeSeed()
	sharedCache [sharedSlots]sharedSlot
)
