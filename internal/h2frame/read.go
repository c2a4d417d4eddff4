package h2frame

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// ReadySource is implemented by sources that can wait for readability while
// holding no memory (internal/sockio's Conn on Linux). ReadReady blocks until
// bytes are available, then reads into a buffer of the given size taken from
// the pool at that moment: it returns an owned buffer whose Len is the number
// of bytes read (at least one), or an error and no buffer.
type ReadySource interface {
	io.Reader
	ReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error)
}

// BoundedReadySource is a ReadySource that can bound its wait
// (internal/sockio's Conn on Linux): ReadReadyWithin returns as ReadReady
// does when bytes come within d, and a nil buffer with a nil error, holding
// nothing, when none did.
type BoundedReadySource interface {
	ReadySource
	ReadReadyWithin(pool *bufpool.Pool, size int, d time.Duration) (*bufpool.Buffer, error)
}

// ErrWouldBlock is what ReadFrame returns when no byte of a next frame came
// within the idle wait (SetIdleWait), and ReadBuffered when no byte of one
// is buffered. It is not an error of the connection: the Reader goes on.
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
	// when the source is a ReadySource (the rollback switch).
	NoPooledReads bool
}

// ErrFrameTooLarge is the connection error ReadFrame returns for a frame
// longer than our SETTINGS_MAX_FRAME_SIZE (RFC 9113 §4.2).
var ErrFrameTooLarge = ConnError{ErrCodeFrameSize, "frame_too_large"}

// Reader reads frames from one connection. Only the connection's reading
// goroutine uses it.
//
// The read buffer rb holds the bytes read and not yet parsed in rb[r:w].
// With a ReadySource and pooling on, rbuf exists only while such bytes exist
// (or while a frame is being assembled), so that an idle connection holds no
// read memory; otherwise rbuf is taken once and freed by Close.
type Reader struct {
	src        io.Reader     // a ReadySource in pooled mode, asserted where used (a field would cost every connection 16 bytes)
	pooled     bool          // pooled mode: src is a ReadySource
	canBound   bool          // src is a BoundedReadySource
	mode       readMode      // how fill may get bytes (ReadBuffered)
	contStream uint32        // stream whose CONTINUATION must come next; 0: none
	wait       time.Duration // SetIdleWait's bound; 0: none
	pool       *bufpool.Pool
	rbSize     int

	maxFrame uint32
	maxList  uint32
	dec      *hpack.Decoder

	err error // sticky connection-level error

	sink DataSink // asked where DATA payloads go; nil: none (SetDataSink)

	seen *seenBlocks // header blocks to replay (seen.go); nil until one is remembered

	// frames holds the read buffer and one frame value of each type,
	// reused by every ReadFrame, with the scratch slices inside them
	// (hf.Fields, sf.Settings, gf.Debug). It is taken from framesPool when
	// bytes arrive and put back when the Reader waits for the socket with
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
	contErr    StreamError // stream error to report once the block is decoded
	blockLen   int         // bytes in block
	contCount  int         // CONTINUATION frames so far
	contPush   bool        // the open block belongs to a PUSH_PROMISE
	discarding bool        // emit drops fields (PUSH_PROMISE blocks)

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

// NewReader returns a Reader over src. When src is a ReadySource and pooling
// is on, the read buffer is held only while unparsed bytes are pending.
func NewReader(src io.Reader, cfg ReaderConfig) *Reader {
	r := &Reader{src: src, pool: cfg.Pool, rbSize: cfg.ReadBufferSize}
	if r.pool == nil {
		r.pool = bufpool.Default()
	}
	if r.rbSize == 0 {
		r.rbSize = defaultReadBufferSize
	}
	// Room for the preface and any fixed-size control frame; larger
	// payloads go through tmp.
	r.rbSize = max(r.rbSize, minReadBufferSize)
	if rs, ok := src.(ReadySource); ok && !cfg.NoPooledReads {
		r.pooled = true
		_, r.canBound = rs.(BoundedReadySource)
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

// Close releases the read buffer; the Reader is unusable afterwards.
func (r *Reader) Close() {
	if r.frames != nil {
		r.dropReadBuffer()
		if r.tmp != nil {
			r.tmp.Free()
			r.tmp = nil
		}
		if r.block != nil {
			r.block.Free()
			r.block = nil
		}
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
		if r.block != nil {
			r.block.Free()
			r.block = nil
		}
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
			return nil, err // r.r == r.w: nothing to release
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

// SetIdleWait bounds how long ReadFrame waits for the first byte of a frame:
// after d without one it returns ErrWouldBlock, holding no read buffer and
// no scratch space, so that the caller can hand the wait to the socket's
// OnReadable and let its goroutine go. Zero (the default) waits for good. It
// takes effect only in pooled mode over a BoundedReadySource (CanIdleWait).
// A wait that finds bytes at once costs nothing extra; one that parks costs
// two read deadline changes.
func (r *Reader) SetIdleWait(d time.Duration) { r.wait = max(d, 0) }

// IdleWait returns SetIdleWait's bound.
func (r *Reader) IdleWait() time.Duration { return r.wait }

// CanIdleWait reports whether SetIdleWait takes effect.
func (r *Reader) CanIdleWait() bool { return r.canBound }

// readMode says how fill may get more bytes.
type readMode uint8

const (
	modeWait     readMode = iota // from the source, waiting as long as it takes
	modeBuffered                 // ReadBuffered: never from the source
)

// errNotBuffered is what ReadBuffered meets when the fed bytes end inside a
// frame, which the caller promised they do not (WholeFrames): a bug above,
// which fails the connection rather than read from a source the caller
// holds.
var errNotBuffered = errors.New("h2frame: fed bytes end inside a frame")

// Drained reports whether the Reader is in pooled mode and holds no read
// buffer, so that the caller may read the next bytes itself and Feed them.
func (r *Reader) Drained() bool {
	return r.pooled && r.err == nil && (r.frames == nil || (r.rbuf == nil && r.tmp == nil))
}

// Shed lets a Drained Reader go of the scratch space it holds between
// reads (its frame structs, the HPACK decoder's scratch), as ReadFrame
// does before it waits for the socket: for a caller about to wait for
// bytes itself (h2conn before sockio's Drive), so that a connection that
// goes idle there holds none of it. It does nothing inside a header block.
func (r *Reader) Shed() {
	if r.Drained() {
		r.shed()
	}
}

// ReadBufferSpec returns the pool and the size a read buffer is taken with,
// for a caller that reads into one itself and Feeds it.
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

// Feed gives a Drained Reader the bytes of a read its caller made: b (its
// Len bytes) becomes the read buffer, owned by the Reader from here on,
// which ReadFrame and ReadBuffered parse next. On a Reader that is not
// Drained, Feed frees b and fails the Reader: bytes would be out of order.
func (r *Reader) Feed(b *bufpool.Buffer) {
	if !r.Drained() {
		b.Free()
		if r.err == nil {
			r.fail(errors.New("h2frame: Feed with bytes still buffered"))
		}
		return
	}
	got := b.Len()
	b.SetLen(b.Cap())
	r.scratch()
	r.rbuf, r.rb, r.r, r.w = b, b.Bytes(), 0, got
}

// ReadBuffered is ReadFrame over the bytes already buffered (Feed) only: at
// a frame boundary with none left it returns ErrWouldBlock, having let go
// of the read buffer and its scratch space, and never
// reads the source. The fed bytes must be whole frames (WholeFrames): one
// that ends inside a frame fails the Reader.
func (r *Reader) ReadBuffered() (Frame, error) {
	r.mode = modeBuffered
	f, err := r.ReadFrame()
	r.mode = modeWait
	return f, err
}

// readOne reads one frame. It returns a nil frame and no error for frames
// that are consumed without being returned (unknown types, CONTINUATIONs
// of a block not yet complete).
func (r *Reader) readOne() (Frame, error) {
	if err := r.fill(HeaderLen); err != nil {
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
// taken by fill, through ReadReady, when bytes are there.
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
func (r *Reader) fill(n int) error {
	if r.frames != nil && r.w-r.r >= n {
		return nil
	}
	if r.pooled && (r.frames == nil || r.rbuf == nil) {
		// About to wait for the socket with nothing buffered: the
		// connection may stay idle for long, so let go of scratch space.
		r.shed()
		var b *bufpool.Buffer
		var err error
		switch {
		case r.mode == modeBuffered:
			return ErrWouldBlock
		case r.wait > 0 && r.canBound:
			b, err = r.src.(BoundedReadySource).ReadReadyWithin(r.pool, r.rbSize, r.wait)
			if b == nil && err == nil {
				return ErrWouldBlock
			}
		default:
			b, err = r.src.(ReadySource).ReadReady(r.pool, r.rbSize)
		}
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
	if r.mode == modeBuffered {
		return errNotBuffered
	}
	r.getReadBuffer()
	if r.r+n > len(r.rb) {
		// Move the unparsed tail to the front to make room.
		r.w = copy(r.rb, r.rb[r.r:r.w])
		r.r = 0
	}
	zeros := 0
	for r.w-r.r < n {
		m, err := r.src.Read(r.rb[r.w:])
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
// buffer (which the caller has emptied).
func (r *Reader) readRest(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if r.mode == modeBuffered {
		return errNotBuffered
	}
	if _, err := io.ReadFull(r.src, p); err != nil {
		return unexpected(err)
	}
	return nil
}
