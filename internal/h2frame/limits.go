package h2frame

// Limits on what a peer can make the frame layer buffer or loop over. Every
// attacker-controlled count has a named limit here with its reason.
const (
	// defaultReadBufferSize is what one read asks the socket for. It holds
	// several default-size (16 KiB) DATA frames with their headers, so a
	// large message arriving in 16 KiB frames costs one read per ~4 frames
	// instead of one or two per frame (strace, 1 MiB ping-pong with 16 KiB
	// frames: 146 reads per round trip with a 16 KiB+9 buffer). In pooled
	// mode the buffer is taken only when bytes are there and given back when
	// they are parsed, so its size costs an idle connection nothing; it is
	// an exact size class, so the pool wastes nothing on it.
	defaultReadBufferSize = 64 << 10

	// defaultMaxHeaderListSize is what grpc-go allows by default (16 MiB).
	defaultMaxHeaderListSize = 16 << 20

	// headerBlockSlack is how far the encoded header block (HEADERS plus
	// CONTINUATION fragments) may exceed SETTINGS_MAX_HEADER_LIST_SIZE
	// before the connection is closed instead of the block being buffered.
	// A literal field encodes in at most its name and value plus a few
	// length bytes, less than the 32 bytes of overhead RFC 9113 §6.5.2
	// counts for it, so a block whose list fits the limit is never larger
	// than the limit; the slack covers table size updates and encoders that
	// pick Huffman where it does not pay. Blocks whose list is over the
	// limit but whose encoding is under the cap are decoded and reported
	// Truncated, which keeps HPACK state in sync (RFC 9113 §4.3).
	headerBlockSlack = 16 << 10

	// continuationBytesPerFrame bounds the CONTINUATION count of one header
	// block: the block may use at most 8 + cap/continuationBytesPerFrame
	// CONTINUATION frames. It defeats floods of tiny or empty
	// CONTINUATIONs (the 2024 "CONTINUATION flood"), which cost a frame
	// parse each while adding nothing, without refusing any peer that
	// splits by a max frame size of at least 1 KiB.
	continuationBytesPerFrame = 1 << 10

	// headerBlockShare is how large a connection's block buffer may grow
	// whatever the pressure on its memory budget (internal/budget), so
	// that a flood on other connections never refuses an ordinary
	// multi-frame block. Each connection may buffer a block up to its
	// header list limit (16 MiB by default, as in grpc-go, which a peer may
	// use legitimately), so without a sum over connections the
	// CONTINUATION flood of 2024 on many connections at once held
	// connections × 16 MiB: growth past the share is refused with GOAWAY
	// ENHANCE_YOUR_CALM once the bytes past the shares reach the budget's
	// cap on them (a 512th of the budget, or the configured list size;
	// budget/limits.go) or the budget is at its soft level, so blocks hold
	// at most that cap plus connections × headerBlockShare.
	headerBlockShare = 64 << 10

	// smallDataMax is the largest DATA payload that, when only partly in
	// the read buffer, is completed by refilling the read buffer (one read
	// that may also bring in the frames behind it) and then copied into an
	// exact-size buffer. Larger payloads are read straight from the source
	// into their own pooled buffer after copying the part already read, so
	// their bytes are copied at most once whatever their size. Payloads
	// wholly in the read buffer are always copied: a memmove of up to 16 KiB
	// costs well under the one read system call it saves.
	smallDataMax = 4 << 10

	// sinkMinData is the smallest DATA payload (padding excluded) the
	// Reader offers to its DataSink. Smaller ones take a buffer of their
	// own: the sink costs a lock and a stream lookup per frame, more than
	// the copy it saves on a small payload, and small frames rarely belong
	// to messages that span frames.
	sinkMinData = 2 << 10

	// landRefillMax is the largest rest of a landing DATA payload (see
	// sinkMinData) that is read into the read buffer, with the frames
	// behind it, and copied, rather than read straight into its
	// destination: one read instead of two (the rest, then the next
	// header), which with 16 KiB frames in 64 KiB reads halves the reads
	// for the cost of copying the rest.
	landRefillMax = 16 << 10

	// minReadBufferSize is the smallest read buffer: it must hold the
	// 24-byte preface and the largest fixed-size control frame with its
	// header (GOAWAY without debug data and PRIORITY are smaller).
	minReadBufferSize = 64

	// smallWriteBufferSize is the size of the first write buffer of a batch,
	// in the batch itself (write.go explains the trade).
	smallWriteBufferSize = 1 << 10

	// minWriteBufferSize is the size of the pooled write buffer taken at the
	// first Write after a Flush: room for a max-size default frame and the
	// control frames that typically accompany it.
	minWriteBufferSize = 32 << 10
)

// maxEmptyReads is how many (0, nil) reads in a row the Reader accepts from
// its source before giving up with io.ErrNoProgress, as bufio does.
const maxEmptyReads = 100

// Scratch space kept between frames is dropped when one unusual frame grew
// it past these sizes, so that a connection does not pin the memory of its
// largest header list or GOAWAY for the rest of its life.
const (
	maxRetainedFields  = 256      // decoded fields of one header list
	maxRetainedScratch = 64 << 10 // encoded header block, GOAWAY debug data
)
