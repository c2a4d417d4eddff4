package h2frame

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"

	"github.com/leangrpc/leangrpc/internal/budget"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// BufferSource is a source that hands over its bytes in pooled buffers, so
// that a Reader over it holds a read buffer only while it holds unparsed
// bytes (internal/h2conn's reader over a Linux socket). The Reader asks for
// the next buffer only at a frame boundary with nothing buffered, having let
// go of its scratch space, and reads the rest of a frame begun in a buffer,
// and a large DATA payload bound for its destination (DataSink), with Read.
// How the source gets the bytes, and how long it waits for them, is its
// own business: the Reader only parses what it is given.
//
// A source that also implements HeaderSource lets the Reader wait for the
// rest of a frame header the same way, holding no read buffer.
type BufferSource interface {
	io.Reader
	// NextBuffer returns the next bytes in a buffer taken from pool with
	// size bytes of room: Len bytes (at least one), owned by the Reader
	// from then on; or an error and no buffer, ErrWouldBlock when the
	// source has no bytes to give now.
	NextBuffer(pool *bufpool.Pool, size int) (*bufpool.Buffer, error)
}

// FullReader is a source that reads a known number of bytes itself: the
// Reader gives it the rest of a frame whose length it knows (a large DATA
// payload, a frame longer than its read buffer) in one call, so that the
// source can wait until they are all there (sockio's ReadFull, under a
// receive low-water mark) rather than wake for each part as Read would.
type FullReader interface {
	// ReadFull fills p, returning nil, io.EOF when the source ended before
	// any byte of p, or another error (io.ErrUnexpectedEOF when it ended
	// inside p).
	ReadFull(p []byte) error
}

// HeaderSource is a BufferSource that may give up waiting for the rest of
// a frame header: a peer that sends a few bytes of a header and then
// nothing must not cost a read buffer (and the caller's goroutine) for as
// long as it waits. When ReadHeaderRest says ErrWouldBlock it has kept a
// copy of the header's first bytes, which its next NextBuffer gives back
// in front of the bytes that follow; the Reader lets go of its read buffer
// and scratch, and ReadFrame says ErrWouldBlock. Only a header is waited
// for this way: inside a payload the Reader holds the part that came and
// reads the rest with Read (or ReadFull).
type HeaderSource interface {
	BufferSource
	// ReadHeaderRest reads into p the bytes that follow begun, the first
	// bytes of a frame header, as Read does; or keeps a copy of begun and
	// returns 0 and ErrWouldBlock when it has no bytes to give now.
	ReadHeaderRest(begun, p []byte) (int, error)
}

// ErrWouldBlock is what a BufferSource's NextBuffer returns when it has no
// bytes to give now, and ReadFrame returns then, holding no read buffer. It
// is not an error of the connection: the Reader goes on at the next call.
var ErrWouldBlock = errors.New("h2frame: no frame ready")

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Pool *bufpool.Pool // nil: bufpool.Default()
	// MaxFrameSize is our SETTINGS_MAX_FRAME_SIZE: larger frames are a
	// FRAME_SIZE_ERROR. Zero means MinMaxFrameSize.
	MaxFrameSize uint32
	// MaxHeaderListSize is our SETTINGS_MAX_HEADER_LIST_SIZE (0: 16 MiB).
	MaxHeaderListSize uint32
	// MaxHeaderTableSize is our SETTINGS_HEADER_TABLE_SIZE (0: 4096).
	MaxHeaderTableSize uint32
	// ReadBufferSize is the size of the pooled read buffer (0: 64 KiB).
	ReadBufferSize int
	// NoPooledReads keeps one read buffer for the Reader's whole life even
	// when the source is a BufferSource (the rollback switch).
	NoPooledReads bool
	// Ledger is charged with the header blocks being reassembled, whose
	// growth past headerBlockShare it may refuse under pressure (nil:
	// blocks are bounded per connection only).
	Ledger *budget.Ledger
}

// ErrFrameTooLarge is the connection error ReadFrame returns for a frame
// longer than our SETTINGS_MAX_FRAME_SIZE (RFC 9113 §4.2).
var ErrFrameTooLarge = ConnError{ErrCodeFrameSize, "frame_too_large"}

// Reader reads frames from one connection. Only the connection's reading
// goroutine uses it.
//
// The read buffer rb holds the bytes read and not yet parsed in rb[r:w].
// With a BufferSource and pooling on, rbuf exists only while such bytes exist
// (or while a frame is being assembled), so that an idle connection holds no
// read memory; otherwise rbuf is taken once and freed by Close.
type Reader struct {
	src        io.Reader // a BufferSource in pooled mode, asserted where used (a field would cost every connection 16 bytes)
	pooled     bool      // pooled mode: src is a BufferSource
	contStream uint32    // stream whose CONTINUATION must come next; 0: none
	pool       *bufpool.Pool
	rbSize     int

	maxFrame uint32
	maxList  uint32
	dec      *hpack.Decoder

	err error // sticky connection-level error

	sink DataSink // asked where DATA payloads go; nil: none (SetDataSink)

	replay *replayCache // header blocks to replay (replay.go); nil until one is remembered

	ledger *budget.Ledger // the connection's memory ledger; set once, nil: none

	// frames holds the read buffer and one frame value of each type,
	// reused by every ReadFrame, with the scratch slices inside them
	// (hf.Fields, sf.Settings, gf.Debug). It is taken from framesPool when
	// bytes arrive and put back when the Reader asks its source for bytes with
	// nothing buffered and no header block open, so that an idle Reader
	// holds none of it; nil meanwhile. Owned by the Reader while it holds
	// it.
	*frames
}

// frames is the part of a Reader that only reading needs: the read
// buffer, the frame values and the state of an open header block.
type frames struct {
	rbuf *bufpool.Buffer // the read buffer; owned by the Reader
	rb   []byte          // borrowed from rbuf, valid while rbuf != nil
	r, w int             // unparsed bytes are rb[r:w]

	// tmp holds the payload of a non-DATA frame too large for the read
	// buffer; owned by the Reader, freed as soon as the frame is parsed.
	tmp *bufpool.Buffer

	// block accumulates the fragments of a header block split across
	// CONTINUATION frames; owned by the Reader.
	block *bufpool.Buffer

	df  DataFrame
	hf  HeadersFrame
	pf  PriorityFrame
	rf  RSTStreamFrame
	sf  SettingsFrame
	ppf PushPromiseFrame
	pgf PingFrame
	gf  GoAwayFrame
	wf  WindowUpdateFrame

	// Header block state, across CONTINUATION frames.
	contErr  StreamError // stream error to report once the block is decoded
	blockLen int         // bytes in block
	// blockCharged is the size asked for block, charged with the
	// ledger's ChargeBlock (headers.go).
	blockCharged int
	contCount    int  // CONTINUATION frames so far
	contPush     bool // the open block belongs to a PUSH_PROMISE
	discarding   bool // emit drops fields (PUSH_PROMISE blocks)

	// emitFn is emit bound to these frames, the HPACK decoder's callback,
	// made once per frames so that Decode does not allocate.
	emitFn func(hpack.HeaderField)
}

// framesPool holds the frames of idle Readers.
var framesPool = sync.Pool{New: func() any {
	fr := new(frames)
	fr.emitFn = fr.emit
	return fr
}}

// scratch makes sure the Reader holds its frames, taking them from
// framesPool after a shed.
func (r *Reader) scratch() {
	if r.frames == nil {
		r.frames = framesPool.Get().(*frames)
	}
}

// shed releases what an idle Reader need not hold while it waits for bytes:
// its frames with their scratch slices, and the HPACK decoder's scratch. The
// dynamic table stays: the peer refers to it. Inside a header block the
// frames stay too (hf or ppf carries the block's first frame). The frame
// returned last is invalid by then (the caller is in the next ReadFrame).
func (r *Reader) shed() {
	r.dec.ReleaseScratch()
	fr := r.frames
	if fr == nil || r.contStream != 0 || fr.rbuf != nil || fr.tmp != nil || fr.block != nil {
		return
	}
	clear(fr.hf.Fields) // do not pin the last block's strings
	fr.hf.Fields = fr.hf.Fields[:0]
	fr.df = DataFrame{} // the caller of ReadFrame owns its buffers
	r.frames = nil
	framesPool.Put(fr)
}

// NewReader returns a Reader over src. When src is a BufferSource and
// pooling is on, the read buffer is held only while unparsed bytes are
// pending.
func NewReader(src io.Reader, cfg ReaderConfig) *Reader {
	r := &Reader{src: src, pool: cfg.Pool, rbSize: cfg.ReadBufferSize, ledger: cfg.Ledger}
	if r.pool == nil {
		r.pool = bufpool.Default()
	}
	if r.rbSize == 0 {
		r.rbSize = defaultReadBufferSize
	}
	// Room for the preface and any fixed-size control frame; larger
	// payloads go through tmp.
	r.rbSize = max(r.rbSize, minReadBufferSize)
	if _, ok := src.(BufferSource); ok && !cfg.NoPooledReads {
		r.pooled = true
	}
	r.maxFrame = cfg.MaxFrameSize
	if r.maxFrame == 0 {
		r.maxFrame = MinMaxFrameSize
	}
	r.maxList = cfg.MaxHeaderListSize
	if r.maxList == 0 {
		r.maxList = defaultMaxHeaderListSize
	}
	tbl := cfg.MaxHeaderTableSize
	if tbl == 0 {
		tbl = DefaultHeaderTableLen
	}
	r.dec = hpack.NewDecoder(tbl)
	return r
}

// Ledger returns the ledger of ReaderConfig, which the connection's other
// parts charge too; it never changes, so any goroutine may ask.
func (r *Reader) Ledger() *budget.Ledger { return r.ledger }

// SetMaxFrameSize changes the largest frame accepted, our advertised
// SETTINGS_MAX_FRAME_SIZE. The peer may use a larger value as soon as it
// reads our SETTINGS, so raise it when sending them; lower it only once the
// peer acknowledged them.
func (r *Reader) SetMaxFrameSize(n uint32) {
	if n < MinMaxFrameSize {
		n = MinMaxFrameSize
	}
	if n > MaxMaxFrameSize {
		n = MaxMaxFrameSize
	}
	r.maxFrame = n
}

// MaxFrameSize returns the largest frame accepted (SetMaxFrameSize).
func (r *Reader) MaxFrameSize() uint32 { return r.maxFrame }

// SetMaxHeaderListSize changes our SETTINGS_MAX_HEADER_LIST_SIZE.
func (r *Reader) SetMaxHeaderListSize(n uint32) {
	if n == 0 {
		n = defaultMaxHeaderListSize
	}
	r.maxList = n
}

// Decoder returns the connection's HPACK decoder, so that the engine can
// apply a changed SETTINGS_HEADER_TABLE_SIZE.
func (r *Reader) Decoder() *hpack.Decoder { return r.dec }

// Buffered reports how many unparsed bytes the Reader holds.
func (r *Reader) Buffered() int {
	if r.frames == nil {
		return 0
	}
	return r.w - r.r
}

// NextFrameBuffered reports whether the next frame, header and payload, is
// in the read buffer: ReadFrame then returns it without asking its source
// for bytes, so a caller may hold a lock across it.
func (r *Reader) NextFrameBuffered() bool {
	if r.frames == nil || r.w-r.r < HeaderLen {
		return false
	}
	p := r.rb[r.r:r.w]
	return HeaderLen+(int(p[0])<<16|int(p[1])<<8|int(p[2])) <= len(p)
}

// Close releases the read buffer; the Reader is unusable afterwards.
func (r *Reader) Close() {
	if r.frames != nil {
		r.dropReadBuffer()
		if r.tmp != nil {
			r.tmp.Free()
			r.tmp = nil
		}
		r.freeBlock()
	}
	if r.err == nil {
		r.err = errReaderClosed
	}
}

var errReaderClosed = errors.New("h2frame: reader closed")

// clientPreface is the client connection preface of RFC 9113 §3.4.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// ClientPreface returns the 24-byte client connection preface.
func ClientPreface() string { return clientPreface }

// ReadPreface reads and checks the 24-byte client connection preface.
func (r *Reader) ReadPreface() error {
	if r.err != nil {
		return r.err
	}
	if err := r.fill(len(clientPreface)); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return r.fail(err)
	}
	got := r.rb[r.r : r.r+len(clientPreface)]
	if string(got) != clientPreface {
		return r.fail(ConnError{ErrCodeProtocol, "bad_preface"})
	}
	r.r += len(clientPreface)
	r.release()
	return nil
}

// fail records a connection-level error: after it the Reader returns the
// same error forever, and it lets go of its read buffer since nothing more
// will be parsed. Stream errors are not sticky.
func (r *Reader) fail(err error) error {
	r.err = err
	if r.frames != nil {
		r.dropReadBuffer()
		r.freeBlock()
	}
	r.contStream = 0
	return err
}

// ReadFrameHeader parses a 9-byte frame header; b must hold at least
// HeaderLen bytes. The reserved bit of the stream identifier is cleared.
func ReadFrameHeader(b []byte) FrameHeader {
	_ = b[8]
	return FrameHeader{
		Length:   uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]),
		Type:     Type(b[3]),
		Flags:    Flags(b[4]),
		StreamID: binary.BigEndian.Uint32(b[5:]) & (1<<31 - 1),
	}
}

// ReadFrame reads the next frame. Unknown frame types are skipped. The
// returned frame is valid until the next call; a DataFrame's Data, and the
// reference its Sink carries (see DataSink), are owned by the caller. Errors
// are ConnError, StreamError (the connection may go on reading) or I/O
// errors.
func (r *Reader) ReadFrame() (Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	for {
		f, err := r.readOne()
		if r.frames != nil && r.tmp != nil {
			// Parsers copy what they keep out of the payload, so a frame
			// too large for the read buffer is not held while idle.
			r.tmp.Free()
			r.tmp = nil
		}
		if err == ErrWouldBlock {
			// r.r == r.w, or the source keeps a header's first bytes
			// (HeaderSource): nothing to release.
			return nil, err
		}
		if err != nil {
			if _, ok := err.(StreamError); !ok {
				if err == io.EOF && (r.Buffered() > 0 || r.contStream != 0) {
					err = io.ErrUnexpectedEOF
				}
				r.fail(err)
			}
			r.release()
			return nil, err
		}
		r.release() // also between the frames of a header block
		if f != nil {
			return f, nil
		}
	}
}

// Empty reports whether the Reader is in pooled mode and holds no unparsed
// byte: the next bytes it parses are the next buffer its source gives.
func (r *Reader) Empty() bool {
	return r.pooled && r.err == nil && (r.frames == nil || (r.rbuf == nil && r.tmp == nil))
}

// ReleaseScratch lets an Empty Reader go of the scratch space it holds
// between frames (its frame structs, the HPACK decoder's scratch), as it
// does itself before it asks its source for bytes: for a caller about to
// wait for bytes elsewhere (h2conn before sockio's ReadEach), so that a
// connection that goes idle there holds none of it. It does nothing inside
// a header block.
func (r *Reader) ReleaseScratch() {
	if r.Empty() {
		r.shed()
	}
}

// ReadBufferSpec returns the pool and the size a read buffer is taken with,
// for a source that reads into one elsewhere and gives it next.
func (r *Reader) ReadBufferSpec() (*bufpool.Pool, int) { return r.pool, r.rbSize }

// WholeFrames reports whether p is a sequence of whole frames: each frame
// header's length brings the next header, or the end of p, exactly.
func WholeFrames(p []byte) bool {
	for len(p) >= HeaderLen {
		n := HeaderLen + (int(p[0])<<16 | int(p[1])<<8 | int(p[2]))
		if n > len(p) {
			return false
		}
		p = p[n:]
	}
	return len(p) == 0
}

// readOne reads one frame. It returns a nil frame and no error for frames
// that are consumed without being returned (unknown types, CONTINUATIONs
// of a block not yet complete).
func (r *Reader) readOne() (Frame, error) {
	if err := r.fillHeader(); err != nil {
		return nil, err
	}
	h := ReadFrameHeader(r.rb[r.r:])
	r.r += HeaderLen
	r.scratch()
	if h.Length > r.maxFrame {
		return nil, ErrFrameTooLarge
	}
	if r.contStream != 0 && (h.Type != TypeContinuation || h.StreamID != r.contStream) {
		// RFC 9113 §6.10: nothing may interleave with a header block,
		// not even frames of unknown types.
		return nil, ConnError{ErrCodeProtocol, "continuation_expected"}
	}
	if h.Type == TypeData {
		return r.readData(h)
	}
	if h.Type > TypeContinuation {
		return nil, r.skip(int(h.Length))
	}
	p, err := r.payload(int(h.Length))
	if err != nil {
		return nil, err
	}
	switch h.Type {
	case TypeHeaders:
		return r.parseHeaders(h, p)
	case TypePriority:
		return r.parsePriority(h, p)
	case TypeRSTStream:
		return r.parseRSTStream(h, p)
	case TypeSettings:
		return r.parseSettings(h, p)
	case TypePushPromise:
		return r.parsePushPromise(h, p)
	case TypePing:
		return r.parsePing(h, p)
	case TypeGoAway:
		return r.parseGoAway(h, p)
	case TypeWindowUpdate:
		return r.parseWindowUpdate(h, p)
	default: // TypeContinuation
		return r.parseContinuation(h, p)
	}
}

// getReadBuffer makes sure rbuf exists. In pooled mode a new buffer is only
// taken by fill, through NextBuffer, when bytes are there.
func (r *Reader) getReadBuffer() {
	r.scratch()
	if r.rbuf == nil {
		r.rbuf = r.pool.Get(r.rbSize)
		r.rbuf.SetLen(r.rbuf.Cap())
		r.rb = r.rbuf.Bytes()
		r.r, r.w = 0, 0
	}
}

// dropReadBuffer frees the read buffer whatever it holds.
func (r *Reader) dropReadBuffer() {
	if r.frames == nil {
		return
	}
	if r.rbuf != nil {
		r.rbuf.Free()
		r.rbuf, r.rb = nil, nil
	}
	r.r, r.w = 0, 0
}

// release gives the read buffer back to the pool in pooled mode once every
// byte in it is parsed, so that an idle connection holds no read memory.
func (r *Reader) release() {
	if r.frames != nil && r.r == r.w {
		r.r, r.w = 0, 0
		if r.pooled && r.rbuf != nil {
			r.dropReadBuffer()
		}
	}
}

// fill makes sure rb[r:r+n] holds n unparsed bytes, n ≤ rbSize. It returns
// io.EOF only when the source ended with no unparsed byte pending.
func (r *Reader) fill(n int) error { return r.fillFor(n, false) }

// fillHeader is fill for the next frame header: a HeaderSource may give up
// waiting for its rest, keeping its first bytes, and fillHeader then lets
// go of the read buffer and scratch and returns ErrWouldBlock.
func (r *Reader) fillHeader() error { return r.fillFor(HeaderLen, true) }

// fillFor is fill, for a frame header when header is set.
func (r *Reader) fillFor(n int, header bool) error {
	if r.frames != nil && r.w-r.r >= n {
		return nil
	}
	if r.pooled && (r.frames == nil || r.rbuf == nil) {
		// About to wait for the socket with nothing buffered: the
		// connection may stay idle for long, so let go of scratch space.
		r.shed()
		b, err := r.src.(BufferSource).NextBuffer(r.pool, r.rbSize)
		if err != nil {
			return err
		}
		got := b.Len()
		b.SetLen(b.Cap())
		r.scratch()
		r.rbuf, r.rb, r.r, r.w = b, b.Bytes(), 0, got
		if got >= n {
			return nil
		}
	}
	var hs HeaderSource
	if header && r.pooled {
		hs, _ = r.src.(HeaderSource)
	}
	r.getReadBuffer()
	if r.r+n > len(r.rb) {
		// Move the unparsed tail to the front to make room.
		r.w = copy(r.rb, r.rb[r.r:r.w])
		r.r = 0
	}
	zeros := 0
	for r.w-r.r < n {
		var m int
		var err error
		if hs != nil {
			m, err = hs.ReadHeaderRest(r.rb[r.r:r.w], r.rb[r.w:])
			if err == ErrWouldBlock && m == 0 {
				// The source keeps the header's first bytes: a peer
				// stalled inside a header costs no read buffer.
				r.dropReadBuffer()
				r.shed()
				return err
			}
		} else {
			m, err = r.src.Read(r.rb[r.w:])
		}
		r.w += m
		if err != nil {
			if r.w-r.r >= n {
				return nil
			}
			if err == io.EOF && r.w > r.r {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if m == 0 {
			// A Reader returning (0, nil) forever would spin here.
			if zeros++; zeros >= maxEmptyReads {
				return io.ErrNoProgress
			}
		} else {
			zeros = 0
		}
	}
	return nil
}

// payload returns the n-byte payload of the current frame, consuming it. It
// lies in the read buffer, or in tmp when the frame does not fit there, and
// is valid until ReadFrame returns: parsers copy what they keep.
func (r *Reader) payload(n int) ([]byte, error) {
	if r.w-r.r >= n {
		p := r.rb[r.r : r.r+n : r.r+n]
		r.r += n
		return p, nil
	}
	if n <= r.rbSize {
		if err := r.fill(n); err != nil {
			return nil, unexpected(err)
		}
		p := r.rb[r.r : r.r+n : r.r+n]
		r.r += n
		return p, nil
	}
	if r.tmp != nil {
		r.tmp.Free()
	}
	r.tmp = r.pool.Get(n)
	p := r.tmp.Bytes()
	if err := r.readThrough(p); err != nil {
		return nil, err
	}
	return p, nil
}

// skip consumes n payload bytes without keeping them.
func (r *Reader) skip(n int) error {
	for {
		k := min(n, r.w-r.r)
		r.r += k
		n -= k
		if n == 0 {
			return nil
		}
		if err := r.fill(min(n, r.rbSize)); err != nil {
			return unexpected(err)
		}
	}
}

// unexpected turns an end of stream inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readRest reads len(p) bytes straight from the source, bypassing the read
// buffer (which the caller has emptied): with one call to a FullReader, else
// with io.ReadFull.
func (r *Reader) readRest(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if fr, ok := r.src.(FullReader); ok {
		return unexpected(fr.ReadFull(p))
	}
	if _, err := io.ReadFull(r.src, p); err != nil {
		return unexpected(err)
	}
	return nil
}
