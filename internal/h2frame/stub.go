package h2frame

// TEMPORARY: signatures only, so that the layers above compile while the
// frame layer is written. The implementation replaces this file.

import (
	"io"

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
	// ReadBufferSize is the size of the pooled read buffer (0: 16 KiB+9).
	ReadBufferSize int
	// NoPooledReads keeps one read buffer for the Reader's whole life even
	// when the source is a ReadySource (the rollback switch).
	NoPooledReads bool
}

// Reader reads frames from one connection. Only the connection's reading
// goroutine uses it.
type Reader struct{}

// NewReader returns a Reader over src. When src is a ReadySource and pooling
// is on, the read buffer is held only while unparsed bytes are pending.
func NewReader(src io.Reader, cfg ReaderConfig) *Reader { return &Reader{} }

// ReadPreface reads and checks the 24-byte client connection preface.
func (r *Reader) ReadPreface() error { panic("h2frame: not implemented") }

// ReadFrame reads the next frame. Unknown frame types are skipped. The
// returned frame is valid until the next call; a DataFrame's Data is owned by
// the caller. Errors are ConnError, StreamError (the connection may go on
// reading) or I/O errors.
func (r *Reader) ReadFrame() (Frame, error) { panic("h2frame: not implemented") }

// SetMaxFrameSize changes our advertised SETTINGS_MAX_FRAME_SIZE once the
// peer acknowledged it.
func (r *Reader) SetMaxFrameSize(n uint32) {}

// SetMaxHeaderListSize changes our SETTINGS_MAX_HEADER_LIST_SIZE.
func (r *Reader) SetMaxHeaderListSize(n uint32) {}

// Buffered reports how many unparsed bytes the Reader holds.
func (r *Reader) Buffered() int { return 0 }

// Close releases the read buffer; the Reader is unusable afterwards.
func (r *Reader) Close() {}

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
type Writer struct{}

// NewWriter returns a Writer over dst; it uses vectored writes when dst is a
// VectorWriter or a *net.TCPConn.
func NewWriter(dst io.Writer, cfg WriterConfig) *Writer { return &Writer{} }

// Encoder returns the connection's HPACK encoder.
func (w *Writer) Encoder() *hpack.Encoder { panic("h2frame: not implemented") }

// WritePreface queues the client connection preface.
func (w *Writer) WritePreface() {}

// WriteData queues a DATA frame carrying a copy of data; len(data) must not
// exceed the peer's max frame size.
func (w *Writer) WriteData(streamID uint32, endStream bool, data []byte) {}

// WriteDataBuffer queues a DATA frame whose payload is b.Bytes()[off:off+n].
// It takes a reference on b until the flush that writes it (it borrows until
// return; the caller keeps its own reference). Payloads above the copy
// threshold go to the socket as their own iovec without a copy.
func (w *Writer) WriteDataBuffer(streamID uint32, endStream bool, b *bufpool.Buffer, off, n int) {}

// WriteHeaders queues a HEADERS frame and as many CONTINUATION frames as the
// encoded block needs, encoding fields with the connection's HPACK encoder.
func (w *Writer) WriteHeaders(streamID uint32, endStream bool, fields []hpack.HeaderField) {}

// WriteSettings queues a SETTINGS frame.
func (w *Writer) WriteSettings(settings ...Setting) {}

// WriteSettingsAck queues a SETTINGS frame with the ACK flag.
func (w *Writer) WriteSettingsAck() {}

// WritePing queues a PING frame.
func (w *Writer) WritePing(ack bool, data [8]byte) {}

// WriteWindowUpdate queues a WINDOW_UPDATE frame (streamID 0: connection).
func (w *Writer) WriteWindowUpdate(streamID, increment uint32) {}

// WriteRSTStream queues a RST_STREAM frame.
func (w *Writer) WriteRSTStream(streamID uint32, code ErrCode) {}

// WriteGoAway queues a GOAWAY frame; debug is copied.
func (w *Writer) WriteGoAway(lastStreamID uint32, code ErrCode, debug []byte) {}

// WritePriority queues a PRIORITY frame.
func (w *Writer) WritePriority(streamID uint32, p Priority) {}

// WriteRaw queues a frame of any type with a copied payload (tests, h2spec).
func (w *Writer) WriteRaw(h FrameHeader, payload []byte) {}

// SetPeerMaxFrameSize records the peer's SETTINGS_MAX_FRAME_SIZE.
func (w *Writer) SetPeerMaxFrameSize(n uint32) {}

// Buffered reports how many bytes are queued and not yet flushed.
func (w *Writer) Buffered() int { return 0 }

// Flush writes everything queued in as few system calls as it can, then
// returns the write buffer to the pool and drops payload references.
func (w *Writer) Flush() error { panic("h2frame: not implemented") }

// Close drops queued frames and releases every buffer.
func (w *Writer) Close() {}
