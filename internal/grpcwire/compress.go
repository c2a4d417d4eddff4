package grpcwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// Compression: the compressors are grpc-go's registry (encoding.Compressor,
// encoding.GetCompressor), so gzip and any compressor a user registers work
// on both roles. A call with no grpc-encoding pays a nil check per message
// and nothing else: the compressed paths below run only for a stream that
// negotiated a compressor, or for a message whose flag says compressed.

// Identity is the grpc-encoding that means no compression.
const Identity = encoding.Identity

// LookupCompressor returns the registered compressor for a grpc-encoding
// value, or nil for "", Identity and a name nobody registered.
func LookupCompressor(name string) encoding.Compressor {
	if name == "" || name == Identity {
		return nil
	}
	return encoding.GetCompressor(name)
}

// UnknownEncoding returns the status a server answers a request whose
// grpc-encoding names no registered compressor with (Unimplemented, before
// the handler runs, as grpc-go does), or nil when the encoding is known.
func UnknownEncoding(name string) *status.Status {
	if name == "" || name == Identity || encoding.GetCompressor(name) != nil {
		return nil
	}
	return status.Newf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", name)
}

// wellKnownCompressors are the names a client looks for in grpc-go's
// registry to fill grpc-accept-encoding. grpc-go advertises every
// registered name, but its list of names is internal to it; these are the
// compressors that exist for grpc-go (its own gzip, and the usual third
// parties). A call's own compressor is always added (AcceptEncoding).
var wellKnownCompressors = [...]string{"gzip", "zstd", "snappy", "s2", "lz4", "deflate", "br"}

// RegisteredCompressors returns the grpc-accept-encoding value a client
// sends: the registered compressors among the well-known names, comma
// separated, or "" when there is none. Compressors register at init, so a
// client computes it once.
func RegisteredCompressors() string {
	var names []string
	for _, n := range wellKnownCompressors {
		if encoding.GetCompressor(n) != nil {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// AcceptEncoding returns the grpc-accept-encoding of a call that sends with
// the compressor sendName ("" for none) on a client whose registered
// compressors are registered: grpc-go adds the call's own name when it is
// not among them (Identity included).
func AcceptEncoding(registered, sendName string) string {
	if sendName == "" || containsName(registered, sendName) {
		return registered
	}
	if registered == "" {
		return sendName
	}
	return registered + "," + sendName
}

// containsName reports whether the comma-separated list holds name.
func containsName(list, name string) bool {
	for list != "" {
		var n string
		n, list, _ = strings.Cut(list, ",")
		if strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

// SplitAcceptEncoding returns the names of a grpc-accept-encoding value as
// grpc-go's ClientSupportedCompressors does: split at commas and trimmed
// (one empty name for an empty value).
func SplitAcceptEncoding(v string) []string {
	names := strings.Split(v, ",")
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
	}
	return names
}

// compressWriter is the io.Writer a compressor writes a message into: one
// pooled buffer with the 5-byte prefix in front, grown by doubling when the
// output does not fit. Writers are pooled because a compressor keeps the
// writer it was given (gzip's does until its next Reset), so one on the
// stack would escape anyway.
type compressWriter struct {
	pool *bufpool.Pool
	b    *bufpool.Buffer // owned by the writer while it compresses
	n    int             // bytes written into b, the prefix included
}

var compressWriters = sync.Pool{New: func() any { return new(compressWriter) }}

func (w *compressWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.b.Len() {
		nb := w.pool.Get(max(2*w.b.Len(), w.n+len(p)))
		nb.SetLen(nb.Cap()) // the class's slack is room too
		copy(nb.Bytes(), w.b.Bytes()[:w.n])
		w.b.Free() // the writer's reference; its bytes were copied
		w.b = nb
	}
	w.n += copy(w.b.Bytes()[w.n:], p)
	return len(p), nil
}

// CompressBuffer compresses the message of b, a buffer EncodeBuffer made
// (prefix and payload), with comp. It takes ownership of b and returns an
// owned buffer: a new one holding the prefix, with the compressed flag set,
// and the compressed payload. An empty message stays as it is, flag unset,
// as grpc-go sends it. A compressed payload over maxSend (0: unlimited) is
// ResourceExhausted, as grpc-go judges the size of what goes on the wire.
func CompressBuffer(pool *bufpool.Pool, comp encoding.Compressor, b *bufpool.Buffer, maxSend int) (*bufpool.Buffer, error) {
	payload := b.Bytes()[PrefixLen:]
	if len(payload) == 0 {
		return b, nil
	}
	w := compressWriters.Get().(*compressWriter)
	// Output about as long as the input fits in almost every case
	// (incompressible data grows by a few bytes per block): one buffer,
	// no growth.
	w.pool, w.b, w.n = pool, pool.Get(PrefixLen+len(payload)+64), PrefixLen
	w.b.SetLen(w.b.Cap())
	err := compressInto(w, comp, payload)
	out, n := w.b, w.n
	*w = compressWriter{}
	compressWriters.Put(w)
	b.Free() // the caller's buffer, taken over; its bytes are compressed
	if err != nil {
		out.Free()
		return nil, status.Errorf(codes.Internal, "grpc: error while compressing: %v", err)
	}
	size := n - PrefixLen
	if maxSend <= 0 {
		maxSend = DefaultMaxSendMsgSize
	}
	if size > maxSend {
		out.Free()
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", size, maxSend)
	}
	if uint64(size) > math.MaxUint32 {
		out.Free()
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: message too large (%d bytes)", size)
	}
	out.SetLen(n)
	PutPrefix(out.Bytes(), true, uint32(size))
	return out, nil
}

func compressInto(w io.Writer, comp encoding.Compressor, payload []byte) error {
	z, err := comp.Compress(w)
	if err != nil {
		return err
	}
	if _, err := z.Write(payload); err != nil {
		z.Close() // hands a pooled compressor back; the write's error wins
		return err
	}
	return z.Close()
}

// EncodeCompressed is EncodeBuffer followed by CompressBuffer with comp:
// the send limit applies to the compressed size. It returns an owned
// buffer. Callers without a compressor call EncodeBuffer themselves, so
// that the uncompressed path costs a nil check and no call more.
func EncodeCompressed(pool *bufpool.Pool, codec encoding.CodecV2, comp encoding.Compressor, msg any, maxSend int) (*bufpool.Buffer, MsgSize, error) {
	b, err := EncodeBuffer(pool, codec, msg, 0)
	if err != nil {
		return nil, MsgSize{}, err
	}
	n := b.Len() - PrefixLen
	if b, err = CompressBuffer(pool, comp, b, maxSend); err != nil {
		return nil, MsgSize{}, err
	}
	return b, MsgSize{Len: n, Wire: b.Len() - PrefixLen}, nil
}

// SetEncoding tells the Parser the grpc-encoding of the messages it
// receives (the request's on a server, the response headers' on a client),
// so that Next decompresses those whose flag says compressed.
func (p *Parser) SetEncoding(name string) {
	p.encoding = name
	p.decomp = LookupCompressor(name)
}

// inflate returns m, whose flag says compressed, decompressed. It takes
// ownership of m. The output is read into one pooled buffer that grows to
// at most the receive limit plus one byte: a small message that inflates
// to gigabytes costs at most that much memory and work before it is
// refused with ResourceExhausted. Errors are status errors with grpc-go's
// codes and texts.
func (p *Parser) inflate(m Message) (Message, error) {
	if p.encoding == "" || p.encoding == Identity {
		m.Free()
		return Message{}, status.Error(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
	}
	if p.decomp == nil {
		// Only a client gets here: a server refuses an unknown encoding
		// before its handler runs (UnknownEncoding).
		m.Free()
		return Message{}, status.Errorf(codes.Internal, "grpc: Decompressor is not installed for grpc-encoding %q", p.encoding)
	}
	var src []byte
	if len(m.Data) > 0 {
		src = m.Data[0].ReadOnlyData() // Next's messages are one buffer
	}
	p.zsrc.Reset(src)
	r, err := p.decomp.Decompress(&p.zsrc)
	if err != nil {
		p.zsrc.Reset(nil)
		m.Free()
		return Message{}, status.Errorf(codes.Internal, "grpc: failed to decompress the message: %v", err)
	}
	limit := p.maxRecv()
	out, n, err := p.readBounded(r, limit, inflatedSizeHint(p.encoding, src))
	if c, ok := r.(io.Closer); ok {
		c.Close() // gzip's reader goes back to its pool on Close only
	}
	p.zsrc.Reset(nil)
	m.Free() // the compressed bytes, all read
	if err != nil {
		return Message{}, status.Errorf(codes.Internal, "grpc: failed to read decompressed data: %v", err)
	}
	if n > limit {
		out.Free()
		return Message{}, status.Errorf(codes.ResourceExhausted, "grpc: received message after decompression larger than max %d", limit)
	}
	msg := Message{Compressed: true, WireLen: len(src)}
	if n == 0 {
		out.Free()
		return msg, nil
	}
	if mem.IsBelowBufferPoolingThreshold(n) {
		// As take's small views: held in the Parser, no allocation.
		msg.release = out // the message's reference, dropped by Message.Free
		p.view.SliceBuffer = out.Bytes()[:n]
		p.one[0] = &p.view
	} else {
		p.one[0] = out.MemRange(0, n) // takes ownership of out
	}
	msg.Data = p.one[:]
	return msg, nil
}

func (p *Parser) maxRecv() int {
	if p.MaxRecv <= 0 {
		return DefaultMaxRecvMsgSize
	}
	return p.MaxRecv
}

// readBounded reads r to its end into one pooled buffer of at most limit
// bytes (an owned buffer, nil with an error) and returns it with the count
// read, reading at most limit+1 bytes: a count of limit+1 means the output
// was longer than limit, and the buffer holds its first limit bytes. The
// buffer starts at the hint and doubles; when it is full, a read of one
// byte tells whether the output goes on, so that a right hint costs no
// growth.
func (p *Parser) readBounded(r io.Reader, limit, hint int) (*bufpool.Buffer, int, error) {
	pool := p.pool()
	b := pool.Get(min(limit, max(hint, 512)))
	b.SetLen(min(limit, b.Cap()))
	n := 0
	for {
		if n == b.Len() {
			k, err := r.Read(p.probe[:])
			if k > 0 {
				if n == limit {
					return b, n + 1, nil
				}
				nb := pool.Get(min(limit, max(2*n, n+1)))
				nb.SetLen(min(limit, nb.Cap()))
				copy(nb.Bytes(), b.Bytes()[:n])
				b.Free() // this reader's reference; its bytes were copied
				b = nb
				b.Bytes()[n] = p.probe[0]
				n++
			}
			if err == io.EOF {
				return b, n, nil
			}
			if err != nil {
				b.Free()
				return nil, 0, err
			}
			continue
		}
		k, err := r.Read(b.Bytes()[n:])
		n += k
		if err == io.EOF {
			return b, n, nil
		}
		if err != nil {
			b.Free()
			return nil, 0, err
		}
	}
}

// maxDeflateRatio bounds what deflate (gzip's format) can inflate one byte
// to: a back-reference of 258 bytes costs at least two bits.
const maxDeflateRatio = 1032

// inflatedSizeHint guesses the size of the compressed message src once
// inflated, to size the buffer it is read into. A gzip stream ends with
// the length of its (last member's) input modulo 2^32 (RFC 1952, ISIZE);
// the peer writes it, so it is believed only as far as deflate can
// inflate, and readBounded still reads at most up to the receive limit.
// Other encodings: a few times the compressed size.
func inflatedSizeHint(encoding string, src []byte) int {
	// 18: a gzip member's smallest size, its header and trailer.
	if encoding == "gzip" && len(src) >= 18 {
		isize := int(binary.LittleEndian.Uint32(src[len(src)-4:]))
		return min(isize, maxDeflateRatio*len(src))
	}
	return 4 * len(src)
}

// sendCompression is how a server compresses its response messages.
type sendCompression struct {
	name string              // the response's grpc-encoding
	comp encoding.Compressor // nil for Identity: messages go as they are
}

// initCompression sets up a request with a grpc-encoding: its messages
// are decompressed with that compressor, and the response's are compressed
// with it too when it is registered, as grpc-go's server answers. An
// unknown encoding leaves both unset; the server refuses the call before
// its handler runs (UnknownEncoding).
func (s *ServerStream) initCompression() {
	s.parser.SetEncoding(s.Req.Encoding)
	if c := s.parser.decomp; c != nil {
		s.comp = &sendCompression{name: s.Req.Encoding, comp: c}
	}
}

// SendEncoding returns the grpc-encoding of the response messages, "" for
// none: what the response headers name once they are sent. Like
// SetSendCompressor, it must not run concurrently with SendMsg or
// SendHeader.
func (s *ServerStream) SendEncoding() string {
	if s.comp == nil {
		return ""
	}
	return s.comp.name
}

// SetSendCompressor makes the response messages compressed with the
// registered compressor name (Identity: not compressed), as grpc-go's
// grpc.SetSendCompressor: the name must be registered and among those the
// client accepts (grpc-accept-encoding), and the headers must not have
// gone out. It must not run concurrently with SendMsg or SendHeader.
func (s *ServerStream) SetSendCompressor(name string) error {
	var c *sendCompression
	if name == Identity {
		c = &sendCompression{name: name}
	} else {
		comp := encoding.GetCompressor(name)
		if comp == nil {
			return fmt.Errorf("unable to set send compressor: compressor not registered %q", name)
		}
		if !containsName(s.Req.AcceptEncoding, name) {
			return fmt.Errorf("unable to set send compressor: client does not support compressor %q", name)
		}
		c = &sendCompression{name: name, comp: comp}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headerSent || s.finished {
		return errors.New("transport: set send compressor called after headers sent or stream done")
	}
	s.comp = c
	return nil
}

// ClientSupportedCompressors returns the compressor names the client
// advertised in grpc-accept-encoding, as grpc-go's
// grpc.ClientSupportedCompressors.
func (s *ServerStream) ClientSupportedCompressors() []string {
	return SplitAcceptEncoding(s.Req.AcceptEncoding)
}
