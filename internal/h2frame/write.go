package h2frame

import (
	"encoding/binary"
	"io"
	"sync"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// copyThreshold is the DATA payload size from which WriteDataBuffer sends
// the payload as its own iovec instead of copying it into the write buffer.
//
// In user space the iovec (a Ref, a Free and a slice entry) beats the copy
// from a few KiB. Over loopback the copy looks as good or better at every
// size: the kernel copies the bytes anyway and a 9-byte header iovec per
// frame costs it an extra fragment, while on a real network the saved
// user-space copy pays for large messages. 8 KiB takes the iovec where the
// saved copy is clearly worth the kernel's extra fragment and keeps small
// messages in one contiguous write. BenchmarkCopyVsIovec measures both
// sides (PERFORMANCE.md, "Copy or iovec for DATA payloads").
const copyThreshold = 8 << 10

// VectorWriter is implemented by sinks that can write several slices in one
// system call (internal/sockio's Conn). WriteVec writes all of bufs or
// returns an error.
type VectorWriter interface {
	WriteVec(bufs [][]byte) (int64, error)
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	Pool *bufpool.Pool // nil: bufpool.Default()
	// PeerMaxFrameSize is the peer's SETTINGS_MAX_FRAME_SIZE (0: 16 KiB).
	PeerMaxFrameSize uint32
}

// Writer encodes frames into a pooled buffer and flushes them together. Only
// the goroutine holding the connection's write role uses it.
//
// Everything a batch of frames needs (the list of queued segments, held
// references, the first write buffer) is in a batch taken from a
// package-wide sync.Pool by the first write and put back by the Flush, so
// that between flushes a Writer is 48 bytes and holds no buffer: an idle
// connection pays for its configuration only.
//
// Small batches avoid the bufpool's reference-counted buffers (a round trip
// costs about 40 ns, the cost of the whole frame encoding): a batch of at
// most smallWriteBufferSize bytes (a PING ack, a window update, a small
// unary response) is encoded into the batch's own 1 KiB array; anything
// larger goes into pooled write buffers.
//
// Queued bytes are a list of segments (iov): runs of encoded frames in the
// write buffers, and large DATA payloads referenced in place. The current
// write buffer's unsegmented tail is wb[seg:].
type Writer struct {
	dst     io.Writer // a VectorWriter gets vectored writes (asserted by Flush: a field would cost every connection 8 bytes)
	pool    *bufpool.Pool
	enc     *hpack.Encoder
	b       *batch // the batch being queued; nil between flushes
	peerMax uint32
	copyMin uint32 // copyThreshold; a field so that benchmarks can move it
}

// batch is the state of one batch of frames, from the first write to the
// Flush.
type batch struct {
	cur    *bufpool.Buffer   // current pooled write buffer, or nil; owned by the batch until Flush
	wb     []byte            // borrowed from cur or small: the current write buffer; len = bytes queued in it
	seg    int               // wb[seg:] is not yet in iov
	queued int               // bytes queued
	iov    [][]byte          // queued segments, borrowed from small and the buffers in held
	held   []*bufpool.Buffer // one reference each, dropped by Flush
	small  [smallWriteBufferSize]byte
}

// batches holds the batches of every Writer between flushes.
var batches = sync.Pool{New: func() any { return new(batch) }}

// maxRetainedSegments bounds the segment lists a pooled batch keeps.
const maxRetainedSegments = 256

// NewWriter returns a Writer over dst; it uses vectored writes when dst is a
// VectorWriter. Which conns can write vectors, and how, is the socket
// layer's decision (sockio.Wrap gives every conn WriteVec), not the frame
// layer's.
func NewWriter(dst io.Writer, cfg WriterConfig) *Writer {
	w := new(Writer)
	w.Init(dst, cfg)
	return w
}

// Init makes w a new Writer over dst, as NewWriter does, in place: a
// connection keeps its Writer inside its own struct rather than in an
// allocation of its own. w must not be in use.
func (w *Writer) Init(dst io.Writer, cfg WriterConfig) {
	*w = Writer{dst: dst, pool: cfg.Pool, peerMax: cfg.PeerMaxFrameSize, copyMin: copyThreshold}
	if w.pool == nil {
		w.pool = bufpool.Default()
	}
	if w.peerMax == 0 {
		w.peerMax = MinMaxFrameSize
	}
	w.enc = hpack.NewEncoder()
}

// Encoder returns the connection's HPACK encoder.
func (w *Writer) Encoder() *hpack.Encoder { return w.enc }

// SetPeerMaxFrameSize records the peer's SETTINGS_MAX_FRAME_SIZE.
func (w *Writer) SetPeerMaxFrameSize(n uint32) {
	if n < MinMaxFrameSize {
		n = MinMaxFrameSize
	}
	if n > MaxMaxFrameSize {
		n = MaxMaxFrameSize
	}
	w.peerMax = n
}

// PeerMaxFrameSize reports the peer's SETTINGS_MAX_FRAME_SIZE in use.
func (w *Writer) PeerMaxFrameSize() uint32 { return w.peerMax }

// Buffered reports how many bytes are queued and not yet flushed.
func (w *Writer) Buffered() int {
	if w.b == nil {
		return 0
	}
	return w.b.queued
}

// room makes sure the current write buffer has n free bytes and returns the
// batch. The first write of a batch takes the batch; its small array is
// the first write buffer when n fits there, and once full, or for a larger
// first write, a buffer is taken from the pool.
func (w *Writer) room(n int) *batch {
	b := w.b
	if b == nil {
		b = batches.Get().(*batch)
		w.b = b
	}
	if cap(b.wb)-len(b.wb) >= n {
		return b
	}
	if b.wb == nil && n <= smallWriteBufferSize {
		b.wb, b.seg = b.small[:0], 0
		return b
	}
	b.cut()
	if b.cur != nil {
		b.held = append(b.held, b.cur) // freed by Flush
	}
	pb := w.pool.Get(max(n, minWriteBufferSize))
	pb.SetLen(pb.Cap())
	b.cur, b.wb, b.seg = pb, pb.Bytes()[:0], 0
	return b
}

// cut ends the current segment of the write buffer.
func (b *batch) cut() {
	if len(b.wb) > b.seg {
		b.iov = append(b.iov, b.wb[b.seg:len(b.wb):len(b.wb)])
		b.seg = len(b.wb)
	}
}

// header appends a frame header; the caller made room for it.
func (b *batch) header(length int, t Type, f Flags, streamID uint32) {
	i := len(b.wb)
	buf := b.wb[:i+HeaderLen]
	h := buf[i : i+HeaderLen : i+HeaderLen]
	h[0], h[1], h[2] = byte(length>>16), byte(length>>8), byte(length)
	h[3], h[4] = byte(t), byte(f)
	binary.BigEndian.PutUint32(h[5:], streamID&(1<<31-1))
	b.wb = buf
	b.queued += HeaderLen + length
}

// frame queues a frame whose payload is copied.
func (w *Writer) frame(t Type, f Flags, streamID uint32, payload []byte) {
	b := w.room(HeaderLen + len(payload))
	b.header(len(payload), t, f, streamID)
	b.wb = append(b.wb, payload...)
}

// WritePreface queues the client connection preface.
func (w *Writer) WritePreface() {
	b := w.room(len(clientPreface))
	b.wb = append(b.wb, clientPreface...)
	b.queued += len(clientPreface)
}

// WriteData queues a DATA frame carrying a copy of data; len(data) must not
// exceed the peer's max frame size.
func (w *Writer) WriteData(streamID uint32, endStream bool, data []byte) {
	var f Flags
	if endStream {
		f = FlagEndStream
	}
	w.frame(TypeData, f, streamID, data)
}

// WriteDataBuffer queues a DATA frame whose payload is b.Bytes()[off:off+n].
// It takes a reference on b until the flush that writes it (it borrows until
// return; the caller keeps its own reference). Payloads above the copy
// threshold go to the socket as their own iovec without a copy.
func (w *Writer) WriteDataBuffer(streamID uint32, endStream bool, buf *bufpool.Buffer, off, n int) {
	p := buf.Bytes()[off : off+n]
	if n < int(w.copyMin) {
		w.WriteData(streamID, endStream, p)
		return
	}
	var f Flags
	if endStream {
		f = FlagEndStream
	}
	b := w.room(HeaderLen)
	b.header(n, TypeData, f, streamID)
	b.cut()
	buf.Ref() // dropped by Flush
	b.held = append(b.held, buf)
	b.iov = append(b.iov, p)
}

// WriteHeaders queues a HEADERS frame and as many CONTINUATION frames as the
// encoded block needs, encoding fields with the connection's HPACK encoder.
func (w *Writer) WriteHeaders(streamID uint32, endStream bool, fields []hpack.HeaderField) {
	bp := blockBufs.Get().(*[]byte)
	blk := w.enc.BeginBlock((*bp)[:0])
	for i := range fields {
		blk = w.enc.AppendField(blk, fields[i])
	}
	w.WriteHeaderBlock(streamID, endStream, blk)
	if cap(blk) > maxRetainedScratch {
		blk = nil // one huge block should not pin memory for good
	}
	*bp = blk
	blockBufs.Put(bp)
}

// blockBufs holds scratch space for encoding header blocks, shared by all
// Writers: the block is copied into the write buffer at once, so an idle
// connection need not keep any.
var blockBufs = sync.Pool{New: func() any { return new([]byte) }}

// WriteHeaderBlock queues an already encoded header block as a HEADERS
// frame and as many CONTINUATION frames as the peer's max frame size
// requires; block borrows until return.
func (w *Writer) WriteHeaderBlock(streamID uint32, endStream bool, block []byte) {
	var f Flags
	if endStream {
		f = FlagEndStream
	}
	t := TypeHeaders
	maxFrag := int(w.peerMax)
	for {
		frag := block
		if len(frag) > maxFrag {
			frag = frag[:maxFrag]
		}
		block = block[len(frag):]
		if len(block) == 0 {
			f |= FlagEndHeaders
		}
		w.frame(t, f, streamID, frag)
		if len(block) == 0 {
			return
		}
		t, f = TypeContinuation, 0
	}
}

// WriteSettings queues a SETTINGS frame.
func (w *Writer) WriteSettings(settings ...Setting) {
	n := 6 * len(settings)
	b := w.room(HeaderLen + n)
	b.header(n, TypeSettings, 0, 0)
	for _, s := range settings {
		b.wb = binary.BigEndian.AppendUint16(b.wb, uint16(s.ID))
		b.wb = binary.BigEndian.AppendUint32(b.wb, s.Val)
	}
}

// WriteSettingsAck queues a SETTINGS frame with the ACK flag.
func (w *Writer) WriteSettingsAck() {
	w.room(HeaderLen).header(0, TypeSettings, FlagAck, 0)
}

// WritePing queues a PING frame.
func (w *Writer) WritePing(ack bool, data [8]byte) {
	var f Flags
	if ack {
		f = FlagAck
	}
	w.frame(TypePing, f, 0, data[:])
}

// WriteWindowUpdate queues a WINDOW_UPDATE frame (streamID 0: connection).
func (w *Writer) WriteWindowUpdate(streamID, increment uint32) {
	b := w.room(HeaderLen + 4)
	b.header(4, TypeWindowUpdate, 0, streamID)
	b.wb = binary.BigEndian.AppendUint32(b.wb, increment&(1<<31-1))
}

// WriteRSTStream queues a RST_STREAM frame.
func (w *Writer) WriteRSTStream(streamID uint32, code ErrCode) {
	b := w.room(HeaderLen + 4)
	b.header(4, TypeRSTStream, 0, streamID)
	b.wb = binary.BigEndian.AppendUint32(b.wb, uint32(code))
}

// WriteGoAway queues a GOAWAY frame; debug is copied.
func (w *Writer) WriteGoAway(lastStreamID uint32, code ErrCode, debug []byte) {
	b := w.room(HeaderLen + 8 + len(debug))
	b.header(8+len(debug), TypeGoAway, 0, 0)
	b.wb = binary.BigEndian.AppendUint32(b.wb, lastStreamID&(1<<31-1))
	b.wb = binary.BigEndian.AppendUint32(b.wb, uint32(code))
	b.wb = append(b.wb, debug...)
}

// WritePriority queues a PRIORITY frame.
func (w *Writer) WritePriority(streamID uint32, p Priority) {
	b := w.room(HeaderLen + 5)
	b.header(5, TypePriority, 0, streamID)
	dep := p.StreamDep & (1<<31 - 1)
	if p.Exclusive {
		dep |= 1 << 31
	}
	b.wb = binary.BigEndian.AppendUint32(b.wb, dep)
	b.wb = append(b.wb, p.Weight)
}

// WriteRaw queues a frame of any type with a copied payload (tests, h2spec).
// h.Length is ignored: the payload's length is written.
func (w *Writer) WriteRaw(h FrameHeader, payload []byte) {
	w.frame(h.Type, h.Flags, h.StreamID, payload)
}

// Flush writes everything queued in as few system calls as it can, then
// returns the write buffers to the pool, drops payload references and puts
// the batch back.
func (w *Writer) Flush() error {
	b := w.b
	if b == nil {
		return nil
	}
	var err error
	if b.cur == nil && len(b.iov) == 0 {
		// Everything is in the small array (or nothing is queued).
		if len(b.wb) > 0 {
			_, err = w.dst.Write(b.wb)
		}
		w.putBatch()
		return err
	}
	b.cut()
	if b.cur != nil {
		b.held = append(b.held, b.cur) // freed by putBatch
		b.cur = nil
	}
	if len(b.iov) == 1 {
		_, err = w.dst.Write(b.iov[0])
	} else {
		switch dst := w.dst.(type) {
		case VectorWriter:
			_, err = dst.WriteVec(b.iov)
		default:
			for _, s := range b.iov {
				if _, err = dst.Write(s); err != nil {
					break
				}
			}
		}
	}
	w.putBatch()
	return err
}

// putBatch drops every queued segment and held reference and puts the
// batch back.
func (w *Writer) putBatch() {
	b := w.b
	w.b = nil
	if b.cur != nil {
		b.cur.Free()
		b.cur = nil
	}
	if len(b.held) > 0 || len(b.iov) > 0 { // not for a batch that fit the small array
		for _, h := range b.held {
			h.Free() // the write buffers, and the references WriteDataBuffer took
		}
		clear(b.held)
		clear(b.iov)
		b.held, b.iov = b.held[:0], b.iov[:0]
		if cap(b.iov) > maxRetainedSegments || cap(b.held) > maxRetainedSegments {
			b.held, b.iov = nil, nil // one huge batch should not pin memory for good
		}
	}
	b.wb, b.seg, b.queued = nil, 0, 0
	batches.Put(b)
}

// Close drops queued frames and releases every buffer.
func (w *Writer) Close() {
	if w.b != nil {
		w.putBatch()
	}
}
