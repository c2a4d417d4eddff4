package h2conn

import (
	"unsafe"

	"github.com/leangrpc/leangrpc/internal/budget"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// The memory budget (internal/budget; ARCHITECTURE.md "The memory budget").
// A server connection charges its ledger, which its frame reader keeps, with
// what it holds on behalf of the peer:
//
//   - header blocks being reassembled (the frame reader);
//   - the header list of each open stream the peer opened, from its HEADERS
//     to the stream's close (headerListBytes);
//   - DATA received and not yet read: the receive queues (bufQueue), and
//     the message a receiver gathers across frames while it is incomplete
//     (sink.go);
//   - control frames queued in reply to the peer (ctrlFrameBytes each).
//
// Under pressure the connection refuses new streams when it holds more
// than its share (onHeaders), and the account may shed it (connShedder).
// A client connection has no ledger: what it holds answers calls its own
// program made.

// ctrlFrameBytes is what one queued control frame holds: its entry in the
// queue, whose slice grows by doubling.
const ctrlFrameBytes = 2 * int64(unsafe.Sizeof(ctrlFrame{}))

// newLedger returns the ledger of a new connection: one on cfg's account
// (the process-wide default when nil) for a server, none for a client.
func newLedger(cfg *Config, role Role) *budget.Ledger {
	if role != RoleServer {
		return nil
	}
	a := cfg.Budget
	if a == nil {
		a = budget.Default()
	}
	return a.NewLedger()
}

// ledger returns the connection's ledger (nil on a client).
func (c *Conn) ledger() *budget.Ledger { return c.fr.Ledger() }

// MemoryHeld returns the bytes the connection's ledger holds for the peer
// (0 on a client).
func (c *Conn) MemoryHeld() int64 { return c.ledger().Held() }

// connShedder is the connection as its account's Shedder.
type connShedder Conn

// Shed ends the connection with GOAWAY ENHANCE_YOUR_CALM: its account is
// over its limit and it holds the most. The GOAWAY's flush is bounded by
// closeFlushTimeout, the grace before the socket closes.
func (cs *connShedder) Shed() {
	(*Conn)(cs).goAway(h2frame.ErrCodeEnhanceYourCalm, "memory_budget", InitiatorEngine)
}

// registerLedger lists the connection with its account once it serves.
func (c *Conn) registerLedger() { c.ledger().Register((*connShedder)(c)) }

// ctrlQueueErrLocked returns the error that ends a connection whose
// control frames queued for the peer are too many: over
// maxQueuedControlFrames, or any while the budget is over its limit and the
// connection holds more than its share. The second ends an offender at
// once, on its reader, rather than when the shedding pass gets to run: a
// flood of small frames grows fast.
func (c *Conn) ctrlQueueErrLocked() *Error {
	if c.peerControl > maxQueuedControlFrames {
		return connErr(h2frame.ErrCodeEnhanceYourCalm, "control_queue_full")
	}
	if c.ledger().OverLimit() {
		return connErr(h2frame.ErrCodeEnhanceYourCalm, "memory_budget")
	}
	return nil
}

// headerListBytes is the size of a header list as RFC 9113 §6.5.2 counts
// it: names, values and 32 bytes per field.
func headerListBytes(fields []hpack.HeaderField) int64 {
	var n int64
	for i := range fields {
		n += int64(len(fields[i].Name)+len(fields[i].Value)) + 32
	}
	return n
}
