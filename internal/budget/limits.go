package budget

// The figures of the budget, each with its reason.
const (
	// DefaultLimit is the budget of servers without MemoryBudget. With
	// grpc-go's defaults one connection may make a server hold about
	// 100 MiB (a stream window of 1 MiB on each of 100 streams that do not
	// read, h2conn/limits.go) plus a 16 MiB header block; 1 GiB lets about
	// ten connections do that at once, more than legitimate peers need,
	// and is a small part of a server machine's memory. A fixed figure
	// rather than a fraction of physical memory: the machine's memory says
	// little in a container, and reading it portably takes a system call
	// per OS; GOMEMLIMIT, when set, is the operator's own statement of
	// what the process may use, so a quarter of it caps the default.
	DefaultLimit = 1 << 30

	// memLimitFraction: the default budget is at most GOMEMLIMIT divided
	// by this, leaving the rest to the handlers and the runtime.
	memLimitFraction = 4

	// MinLimit is the smallest budget: below a few granules per
	// connection the rounding of ledgers alone would reach it.
	MinLimit = 1 << 20

	// softFraction places the soft level at limit - limit/softFraction:
	// 3/4 of the limit. Between the two, refused new streams and
	// connections give the streams in flight room to finish before
	// anything is shed.
	softFraction = 4

	// blockFraction sets the cap on header-block bytes buffered past the
	// connections' guaranteed shares (h2frame's headerBlockShare): the
	// limit divided by it, 2 MiB for the default budget, twice a server's
	// default header-list limit. Multi-frame
	// header blocks are rare (a block fits a 16 KiB frame unless its
	// metadata is larger) and are read in a moment, so a cap far below the
	// limit refuses no one who is not sending a block that never ends, and
	// it keeps the CONTINUATION flood on many connections to a few MiB
	// rather than to the soft level (at 1/128 of the budget, 8 MiB, the
	// flood grew a server's RSS by 38 MiB in 10 s; at 1/512 by 12 MiB:
	// the blocks' buffers grow by doubling, and the collector lets the
	// heap reach twice what is live). A server whose MaxHeaderListSize is
	// above the cap raises it to that size (Account.AllowBlocks), so that
	// one such list can always be received.
	blockFraction = 512

	// granule is the step in which a ledger reserves from its account.
	// A unary call whose request and header list fit in one (most gRPC
	// messages are well under 8 KiB) moves no shared counter; a busy
	// connection's account may exceed what it holds by up to two.
	granule = 8 << 10
)

// HandshakeBytes is what a server charges for a connection in its
// credentials handshake, before its ledger exists: the handshake
// goroutine's stack (crypto/tls grows it past its first 8 KiB) and
// crypto/tls's record and handshake buffers, 16 KiB and more.
const HandshakeBytes = 32 << 10

// GreetingBytes is what a server charges for a connection from its start
// until the client's preface and SETTINGS came: what a connection waiting
// without goroutine or read buffer holds (2.9 KB of heap measured with
// 2,000 of them on Linux), rounded up to a page. It lets a flood of silent
// connections reach the budget's soft level, where new connections are
// refused, rather than grow unseen.
const GreetingBytes = 4 << 10
