package h2conn

import (
	"fmt"

	"github.com/leangrpc/leangrpc/internal/hpack"
)

// HeaderListTooLargeError is returned, with nothing sent, by the methods
// that send HEADERS when the fields are over the peer's
// SETTINGS_MAX_HEADER_LIST_SIZE. RFC 9113 §6.5.2 calls the setting
// advisory, but peers enforce it: grpc-go's client fails the whole
// connection on a response header block over its limit, its server drops
// the connection of a request over its own. Checking before sending keeps
// the failure to the one call, as grpc-go's own check does.
type HeaderListTooLargeError struct {
	Limit uint32 // the peer's SETTINGS_MAX_HEADER_LIST_SIZE
}

func (e *HeaderListTooLargeError) Error() string {
	return fmt.Sprintf("h2conn: header list over the peer's limit of %d bytes", e.Limit)
}

// headerListFitsLocked checks fields against the peer's header list limit
// by RFC 7541's count (name, value and 32 bytes per field); mu must be
// held. A peer that announced no limit costs one compare.
func (c *Conn) headerListFitsLocked(fields []hpack.HeaderField) error {
	limit := c.peer.maxHeaderListSize
	if limit == ^uint32(0) {
		return nil
	}
	var n uint64
	for i := range fields {
		n += uint64(len(fields[i].Name)+len(fields[i].Value)) + 32
	}
	if n > uint64(limit) {
		return &HeaderListTooLargeError{Limit: limit}
	}
	return nil
}
