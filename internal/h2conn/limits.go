package h2conn

import "time"

// Defaults for zero Config fields.
//
// Memory bound per connection, receive side: DATA payloads wait in stream
// receive queues until the application reads them. The connection window is
// given back on receipt (so one slow stream cannot stall the others), hence
// the bound is the stream windows, not the connection window:
// MaxConcurrentStreams × (stream window + MaxExpectBytes widening on the
// streams that asked for it). With the defaults and handlers that do not
// read, that is 100 × 1 MiB = 100 MiB in the worst case, and 100 × 16 MiB
// once the BDP estimator grew the windows to maxBDPWindow (grpc-go has the
// same bound with its 16 MiB BDP limit and no stream limit); streams that
// read hold about one frame each. Giving the connection window back only
// as payloads are read would bound this by the connection window, but a
// stream that reads would then starve behind streams that do not
// (TestNoHeadOfLineBlocking). Send side: a stream's slot holds one item
// (sendslot.go), so each stream holds at most the one buffer it was given.
const (
	// DefaultMaxConcurrentStreams: our SETTINGS_MAX_CONCURRENT_STREAMS.
	// RFC 9113 §6.5.2 recommends no less than 100; each stream may pin a
	// stream window of memory (see above), so it is the memory knob.
	DefaultMaxConcurrentStreams = 100
	// ServerMaxConcurrentStreams is the SETTINGS_MAX_CONCURRENT_STREAMS a
	// leangrpc server advertises when no MaxConcurrentStreams option sets
	// one. grpc-go's server advertises none, and one client could open
	// 100,000 streams on one connection, each holding a handler goroutine
	// and a stream (1.55 GB of RSS). An advertised limit is safe for
	// drop-in use: grpc-go's and leangrpc's clients queue streams over it
	// rather than fail them, as every HTTP/2 client must (RFC 9113
	// §5.1.2). 1000 is above what watch-heavy services open per
	// connection (kube-apiserver raised Go's default of 250 to 1000 for
	// its watch clients; x/net's server advertises 250, hyper's 200,
	// nginx 128) and far above leanbench's ×120 rows, and it bounds a
	// connection to 1000 handler goroutines.
	ServerMaxConcurrentStreams = 1000
	// DefaultInitialStreamWindow: 1 MiB is above the bandwidth-delay
	// product of loopback and of a LAN, so no probing is needed there.
	DefaultInitialStreamWindow = 1 << 20
	// DefaultInitialConnWindow: 16 MiB lets 16 streams run at full window.
	DefaultInitialConnWindow = 16 << 20
	// DefaultMaxHeaderListSize: grpc-go's default (16 KiB is too small for
	// some metadata users; grpc-go accepts 16 MiB).
	DefaultMaxHeaderListSize = 16 << 20
	// DefaultServerMaxHeaderListSize is a server's header-list limit
	// when no option sets one: 1 MiB, a sixteenth of grpc-go's. A server
	// takes header lists from any peer, and the bytes of a list in
	// progress are charged to the memory budget, whose cap on header
	// blocks past each connection's share is 2 MiB by default (budget's
	// blockFraction): a larger advertised limit would let a legitimate
	// list be refused with GOAWAY instead of failing at the client with
	// the clear error grpc-go's client gives for a list over the peer's
	// limit. gRPC C-core's default is 16 KiB; metadata of more than a
	// MiB is rare, and MaxHeaderListSize raises the limit (and the cap
	// with it).
	DefaultServerMaxHeaderListSize = 1 << 20
	// DefaultSettingsTimeout bounds the wait for the SETTINGS ACK.
	DefaultSettingsTimeout = 10 * time.Second
	// DefaultPrefaceTimeout bounds a server's wait for the client's
	// preface and first SETTINGS: a connection that stalls before them
	// (slowloris) is closed. A client sends both at once without waiting
	// for anything, so 10 s is ample beyond a round trip; grpc-go's
	// ConnectionTimeout (TLS handshake, preface and first SETTINGS) is
	// 120 s, which let 512 stalled connections stay for its whole length.
	DefaultPrefaceTimeout = 10 * time.Second
	// A server bounds a read inside a frame that brings no byte
	// (Config.FrameStallTimeout, stall.go) by its ConnectionTimeout too,
	// 10 s by default, closing after between one and two bounds: the
	// segments of one frame follow each other within round trips, and a
	// healthy link goes 10 s without a byte only after several lost
	// retransmissions in a row. A frame that arrives slowly but steadily
	// is never cut: the bound is on no progress. grpc-go has no bound, and
	// a peer stalled inside a frame holds its reader and read buffer for
	// the connection's life there.
	// DefaultWriteBatchBytes: bytes encoded per flush; large enough for one
	// syscall to carry many frames (a large DATA payload is an iovec of
	// its own, not a copy), small enough that a writer returns to the
	// control queue often. At 256 KiB one 256 KiB frame filled a batch, so
	// large messages cost a writev per frame, several per megabyte where
	// raw TCP makes one.
	DefaultWriteBatchBytes = 1 << 20
	// MaxExpectBytes caps how far ExpectMessage widens one stream's window.
	MaxExpectBytes = 64 << 20
	// maxBDPWindow caps the stream window the BDP estimator may grow to.
	maxBDPWindow = 16 << 20
	// defaultKeepaliveTimeout: grpc-go's default keepalive Timeout.
	defaultKeepaliveTimeout = 20 * time.Second
	// defaultPingMinTime: grpc-go's default EnforcementPolicy.MinTime.
	defaultPingMinTime = 5 * time.Minute
	// pingWithoutStreamMinTime: with no streams and pings not permitted,
	// grpc-go still tolerates one ping per two hours.
	pingWithoutStreamMinTime = 2 * time.Hour
	// shutdownPingTimeout: how long the two-phase GOAWAY waits for the
	// PING ACK before sending the final GOAWAY anyway.
	shutdownPingTimeout = 5 * time.Second
	// peerGoAwayCloseDelay: after the peer's GOAWAY, with no stream left,
	// how long we wait for the peer to close before closing ourselves.
	peerGoAwayCloseDelay = time.Second
	// closeFlushTimeout bounds the final GOAWAY flush when closing.
	closeFlushTimeout = time.Second
)

// Limits on what a peer can make us do or hold. Each is a count the peer
// controls; exceeding it is ENHANCE_YOUR_CALM (or the RFC code named).
const (
	// maxQueuedControlFrames caps control frames queued in reply to the
	// peer (SETTINGS ACK, PING ACK, RST_STREAM) while it does not read
	// what we write: a PING or reset flood against a peer that never reads
	// would otherwise grow the queue without bound. Across connections
	// the memory budget bounds them (membudget.go).
	maxQueuedControlFrames = 10000
	// maxPingStrikes: grpc-go's limit on pings that break the
	// enforcement policy before GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
	maxPingStrikes = 2
	// rateWindow is the window of the limits counted per window of time
	// (maxResetsPerWindow, maxSettingsPerWindow). They share its start
	// (Conn.rateStart) so that Conn stays in its size class.
	rateWindow = time.Second
	// maxResetsPerWindow: RST_STREAMs a peer may cause (its own resets and
	// the streams we had to reset for it) per rateWindow, the "rapid
	// reset" attack of 2023 (CVE-2023-44487): each costs a stream setup.
	maxResetsPerWindow = 1000
	// maxSettingsPerWindow: SETTINGS frames (ACKs aside) a peer may send
	// per rateWindow, the SETTINGS flood (CVE-2019-9515). Each owes an
	// ACK, and maxQueuedControlFrames counts only ACKs not yet written: a
	// flood from a peer that reads nothing fills the socket buffers, ours
	// and the peer's (megabytes), with ACKs before that queue fills, and
	// then the GOAWAY finds no room and the connection ends in a plain
	// close. A flood meets this limit after under a kilobyte of ACKs, so
	// the GOAWAY fits even in the smallest socket buffers; a peer kept
	// under it adds at most 900 bytes of ACKs a second. A legitimate
	// peer sends its first SETTINGS and a few changes: grpc-go's BDP
	// estimator sends one each time it grows the window, by at least
	// 1.32 times and at most once a round trip, from 64 KiB to its 16 MiB
	// cap (at most 20 in a connection's life, however fast they come);
	// h2spec sends a few per connection (TestH2spec). 100 is five times
	// grpc-go's lifetime count in one second.
	maxSettingsPerWindow = 100
	// unstartedResetWeight: how many resets a peer's RST_STREAM counts for
	// when its stream still awaited its request (Stream.SetHandlers: a
	// unary call whose DATA had not come). A client has little reason to
	// cancel a unary call between its HEADERS and its message, which go
	// out together; rapid reset does nothing else. So such resets are
	// held to a tenth of the limit, 100 a second, and a reconnecting
	// attacker gets a tenth of the streams per connection it would
	// otherwise (the idea of hyper's limit on streams reset before the
	// application accepted them).
	unstartedResetWeight = 10
	// oversizedListWeight: how many resets a request refused for its
	// header list's size (431) counts for. Such a block costs decoding
	// up to the list bound (hpack/limits.go) and the checks of every
	// field, many times what it costs the peer to send (the HPACK bomb);
	// a client whose metadata is too large gets errors on every call
	// anyway. So ten a second end the connection.
	oversizedListWeight = 100
	// maxEmptyDataFrames: DATA frames with neither payload nor END_STREAM
	// in a row; they cost a dispatch each and carry nothing.
	maxEmptyDataFrames = 1000
	// CONTINUATION floods and header bytes are bounded by the frame
	// layer (h2frame/limits.go): per connection under our
	// SETTINGS_MAX_HEADER_LIST_SIZE, summed over connections by the
	// memory budget (membudget.go); what a block decodes to by
	// hpack/limits.go.
	// initialPeerMaxStreams: what a client assumes of the server's
	// MAX_CONCURRENT_STREAMS until its SETTINGS arrive (the RFC's
	// "unlimited" would get a burst of early streams refused).
	initialPeerMaxStreams = 100
	// recentClosedIDs: how many closed peer stream ids the engine
	// remembers to answer HEADERS on them with STREAM_CLOSED rather than
	// PROTOCOL_ERROR (RFC 9113 §5.1 vs §5.1.1), and to ignore DATA on
	// those it reset. 15, so that the ring and Conn.recentReset, a bit
	// per id, take 32 bytes together.
	recentClosedIDs = 15
)
