package grpcwire

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// PrefixLen is the length of the prefix before each message: one flag byte
// (1 = compressed) and a big-endian 32-bit length.
const PrefixLen = 5

// DefaultMaxRecvMsgSize is grpc-go's default receive limit.
const DefaultMaxRecvMsgSize = 4 << 20

// DefaultMaxSendMsgSize is grpc-go's default send limit: none.
const DefaultMaxSendMsgSize = math.MaxInt32

// PutPrefix writes a message prefix into p[:PrefixLen].
func PutPrefix(p []byte, compressed bool, n uint32) {
	p[0] = 0
	if compressed {
		p[0] = 1
	}
	binary.BigEndian.PutUint32(p[1:PrefixLen], n)
}

// Message is one received message.
type Message struct {
	// Data is the payload, always one mem.Buffer: a view of the pooled
	// buffer the message landed in when it lay in one DATA frame, else one
	// pooled buffer the Parser gathered its frames into, so a codec never
	// has to gather it again. The receiver owns the message and must Free
	// it; the slice holding the buffer, and the view of a small message,
	// belong to the Parser and are valid until the next Next. The view of
	// a small message is not reference-counted (its Ref does nothing):
	// DecodeMessage hands it only to grpc-go's proto codec, which keeps
	// nothing, and gives any other codec a copy.
	Data mem.BufferSlice
	// Compressed says the message arrived with the compressed flag; Next
	// returns it decompressed.
	Compressed bool
	// WireLen is the payload's length as it arrived when Next
	// decompressed it (Compressed), for stats handlers; 0 otherwise.
	WireLen int
	// release is the pooled buffer a small message's Data views (mem's
	// small buffers cannot hand memory back); owned by the Message.
	release *bufpool.Buffer
	// gathered is the pooled buffer a large message was gathered in,
	// whose reference Data holds: DecodeMessage may take its memory out
	// of the pool (Detach) for a message whose fields alias it.
	gathered *bufpool.Buffer
}

// MsgSize is a message's size as stats handlers report it, without the
// 5-byte prefix: Len of the payload, Wire of the payload as it crossed the
// wire (compressed, when it was; else Len).
type MsgSize struct{ Len, Wire int }

// size returns the message's MsgSize.
func (m *Message) size() MsgSize {
	n := m.Data.Len()
	if m.WireLen > 0 {
		return MsgSize{Len: n, Wire: m.WireLen}
	}
	return MsgSize{Len: n, Wire: n}
}

// Free releases the message's memory.
func (m *Message) Free() {
	m.Data.Free()
	m.Data = nil
	if m.release != nil {
		m.release.Free() // the message's reference, taken in take
		m.release = nil
	}
}

// sliceView is a mem.Buffer over bytes a Message's release reference keeps
// alive, held in the Parser so that handing it out as an interface value
// does not allocate. Its methods are mem.SliceBuffer's: Ref and Free do
// nothing.
type sliceView struct{ mem.SliceBuffer }

// chunk is one queued DATA payload: a mem.Buffer for payloads above mem's
// pooling threshold (sliced into views without copying), or the pooled
// buffer itself for small ones, which mem would copy.
type chunk struct {
	m mem.Buffer
	b *bufpool.Buffer
}

func (c chunk) bytes() []byte {
	if c.b != nil {
		return c.b.Bytes()
	}
	return c.m.ReadOnlyData()
}

func (c chunk) free() {
	if c.b != nil {
		c.b.Free()
	} else {
		c.m.Free()
	}
}

// Parser splits the DATA payloads of one stream into messages. A message
// that lies in one payload is a view of the buffer it arrived in (no copy).
// A message that spans payloads is gathered into one pooled buffer as its
// payloads arrive, each payload freed as soon as its bytes are copied; the
// buffer holds the announced length when the peer may send that much under
// the Window on top of what arrived, else it grows with the arrivals, so a
// prefix alone costs no memory. One copy, where handing the codec a list
// of views costs a list allocation, a view per payload and the codec's own
// gathering copy. With a transport that can land DATA in a buffer it is told of
// (Sink, Landed: h2conn.Stream.RecvInto), the frames of a gathered message
// are read straight into it and that copy goes too. A Parser is used by one
// goroutine at a time.
type Parser struct {
	// MaxRecv bounds a message's length; 0 means DefaultMaxRecvMsgSize.
	// The prefix is checked before any of the message is buffered.
	MaxRecv int
	// Pool supplies the buffers that messages spanning payloads are
	// gathered into; nil means bufpool.Default().
	Pool *bufpool.Pool
	// Window bounds how far a gathering buffer reaches past the bytes that
	// arrived: what the peer may still send under flow control (the
	// stream's receive window); 0 means DefaultGatherWindow. A message
	// longer than that grows its buffer as its bytes arrive, so a peer
	// cannot make the receiver hold memory with a prefix alone.
	Window int

	asm  *bufpool.Buffer // owned by the Parser: the spanning message being gathered (at base), nil when none; may hold less than the message (grow)
	asmN int             // bytes of asm filled so far; those past base are counted in avail
	base int             // where the message starts in asm: 0, or PrefixLen when asm began as a guess

	// Speculation: a stream of large messages usually sends the next one
	// as long as the last, so while waiting for it the Parser registers a
	// range for its prefix and that many bytes (spec). The transport takes
	// the buffer when the first frame lands and the Parser adopts it as asm
	// holding the prefix at 0; when the prefix says another length, what
	// landed is copied out (stale) and parsed as queued bytes.
	guess  int             // length of the last large message; 0: none
	spec   bool            // asm (or the range the transport will take it for) holds bytes from the next prefix on; all of them count in avail
	stale  *bufpool.Buffer // owned by the Parser: a guessed buffer the transport may still land bytes in, copied out by Landed
	staleN int             // bytes of stale accounted for

	q     []chunk       // owned by the Parser, one reference each: pending payloads, q[0] read from off
	qbuf  [4]chunk      // backs q while it is short
	one   [1]mem.Buffer // backs a single-piece Message.Data (the buffer in it is the receiver's)
	view  sliceView     // the view one holds for a small message, valid until the next take
	off   int
	avail int // unread bytes across q

	// Compression of the received messages (SetEncoding): the
	// grpc-encoding, its registered compressor (nil: none or unknown) and
	// the reader inflate hands the compressor, kept here so that handing
	// it over does not allocate.
	encoding string
	decomp   encoding.Compressor
	zsrc     bytes.Reader
	probe    [1]byte // readBounded's one-byte read past a full buffer

	havePrefix bool
	announced  bool // TakeExpect reported the current message
	flag       byte
	length     int
}

// TakeExpect returns, once per message, how many bytes the message that
// has begun still needs (0 when none has begun or it is complete), for
// h2conn.Stream.ExpectMessage.
func (p *Parser) TakeExpect() int {
	if !p.havePrefix || p.announced {
		return 0
	}
	p.announced = true
	return p.Need()
}

// Push appends one DATA payload. It takes ownership of b.
func (p *Parser) Push(b *bufpool.Buffer) {
	if b == nil {
		return
	}
	// A payload handed over means the transport lands nothing more in
	// a guessed buffer.
	p.dropStale()
	p.pushOwned(b)
}

// pushOwned is Push without ending a stale guess. It takes ownership of b.
func (p *Parser) pushOwned(b *bufpool.Buffer) {
	if b.Len() == 0 {
		b.Free()
		return
	}
	var skip int
	if p.asm != nil {
		skip = p.fill(b.Bytes())
		if skip == b.Len() {
			b.Free()
			return
		}
		// The rest begins the next message: queued, read from skip.
	}
	if mem.IsBelowBufferPoolingThreshold(b.Len()) {
		p.pushFrom(chunk{b: b}, skip)
		return
	}
	p.pushFrom(chunk{m: b.Mem()}, skip)
}

// Sink reports where the transport may write the stream's next bytes
// (h2conn.Stream.RecvInto): the buffer b, borrowed and valid until the next
// Next, Landed or Close, and the range [from, to) of it still to come. to
// is 0 when there is no such place (Push the next payload instead). A nil b
// with to > 0 asks the transport to take a buffer of at most to bytes when
// data comes (it may take fewer: as many as the peer may send), and to hand
// it over through Landed.
func (p *Parser) Sink() (b *bufpool.Buffer, from, to int) {
	switch {
	case p.stale != nil:
		// Only what the transport still lands there: no new range.
		return p.stale, p.staleN, p.staleN
	case p.asm != nil:
		if p.asmN == p.asm.Len() && p.asmN < p.asmWant() {
			// Every byte of the range was reported, so the transport
			// lands nothing more in asm: it may move.
			p.grow()
		}
		if p.asmN < p.asm.Len() {
			return p.asm, p.asmN, p.asm.Len()
		}
		return nil, 0, 0
	case p.spec:
		return nil, 0, PrefixLen + p.guess
	case p.havePrefix && p.avail == 0 && p.length >= gatherEarly:
		// A large message of which only the prefix arrived: its buffer
		// is taken when its first bytes come (nothing held until then).
		return nil, 0, p.length
	case !p.havePrefix && p.avail == 0 && p.guess >= gatherEarly:
		p.spec, p.base = true, PrefixLen
		return nil, 0, PrefixLen + p.guess
	}
	return nil, 0, 0
}

// Landed records that the transport wrote the next n bytes into Sink's
// buffer at from. It takes ownership of b, the buffer the transport took
// for a nil Sink buffer (nil otherwise). Bytes beyond the range are
// ignored.
func (p *Parser) Landed(b *bufpool.Buffer, n int) {
	if b != nil {
		lazy := p.spec || p.havePrefix && p.avail == 0 // the ranges Sink offers without a buffer
		if !lazy || p.asm != nil || p.stale != nil || b.Len() > p.lazyWant() {
			b.Free() // not asked for; cannot happen with RecvInto
			return
		}
		p.asm, p.asmN = b, 0 // the Parser's reference from here on
		if !p.spec {
			p.base = 0
		}
	}
	if n <= 0 {
		return
	}
	if p.stale != nil {
		// A guess that was wrong: its bytes are queued as payloads.
		k := min(n, p.stale.Len()-p.staleN)
		c := p.pool().Copy(p.stale.Bytes()[p.staleN : p.staleN+k])
		p.staleN += k
		if p.staleN == p.stale.Len() {
			p.dropStale()
		}
		p.pushOwned(c)
		return
	}
	if p.asm == nil || n > p.asm.Len()-p.asmN {
		return
	}
	p.asmN += n
	p.avail += n
}

// dropStale frees the guessed buffer once no byte can land in it any more.
func (p *Parser) dropStale() {
	if p.stale != nil {
		p.stale.Free() // the Parser's reference
		p.stale, p.staleN = nil, 0
	}
}

func (p *Parser) pool() *bufpool.Pool {
	if p.Pool == nil {
		return bufpool.Default()
	}
	return p.Pool
}

// fill copies what the message being gathered still lacks from the head of
// src into asm and returns how many bytes it took.
func (p *Parser) fill(src []byte) int {
	taken := 0
	for {
		n := copy(p.asm.Bytes()[p.asmN:], src[taken:])
		p.asmN += n
		p.avail += n
		taken += n
		if taken == len(src) || p.asmN >= p.asmWant() {
			return taken
		}
		p.grow() // asm is full and the message goes on
	}
}

// DefaultGatherWindow is the Parser's Window when none is set: h2conn's
// default stream receive window.
const DefaultGatherWindow = 1 << 20

func (p *Parser) window() int {
	if p.Window > 0 {
		return p.Window
	}
	return DefaultGatherWindow
}

// asmWant is how many bytes asm holds once the message is gathered: the
// guessed prefix and message, or the message from base.
func (p *Parser) asmWant() int {
	if p.spec {
		return PrefixLen + p.guess
	}
	return p.base + p.length
}

// lazyWant is the length of the range Sink offers without a buffer.
func (p *Parser) lazyWant() int {
	if p.spec {
		return PrefixLen + p.guess
	}
	return p.length
}

// gatherSize is the length of a gathering buffer for a message of want
// bytes of which have arrived: no more than the peer may send on top
// (Window), and at least twice cur (the buffer it replaces) so that a
// message much longer than the window is copied O(1) times per byte.
func (p *Parser) gatherSize(want, have, cur int) int {
	return min(want, max(have+p.window(), 2*cur))
}

// grow moves the asmN bytes gathered so far into a longer buffer; asm must
// be full, so that the transport lands nothing more in it.
func (p *Parser) grow() {
	want := p.asmWant()
	b := p.pool().Get(p.gatherSize(want, p.asmN, p.asm.Len()))
	b.SetLen(min(want, b.Cap())) // the class's slack is free room
	copy(b.Bytes(), p.asm.Bytes()[:p.asmN])
	p.asm.Free() // the Parser's reference
	p.asm = b
}

// pushFrom queues c with its first skip bytes already consumed (skip > 0
// only while the queue is empty, after fill took them).
func (p *Parser) pushFrom(c chunk, skip int) {
	p.push(c)
	if skip > 0 {
		p.off = skip
		p.avail -= skip
	}
}

// PushMem appends one payload already in mem form. It takes ownership of m.
func (p *Parser) PushMem(m mem.Buffer) {
	p.dropStale()
	if m.Len() == 0 {
		m.Free()
		return
	}
	var skip int
	if p.asm != nil {
		skip = p.fill(m.ReadOnlyData())
		if skip == m.Len() {
			m.Free()
			return
		}
	}
	p.pushFrom(chunk{m: m}, skip)
}

func (p *Parser) push(c chunk) {
	if p.q == nil {
		p.q = p.qbuf[:0]
	}
	p.q = append(p.q, c)
	p.avail += len(c.bytes())
}

// Buffered reports how many bytes are held and not yet returned.
func (p *Parser) Buffered() int { return p.avail }

// InProgress reports whether a message has begun and not been completed
// (the condition under which an end of stream is a truncation).
func (p *Parser) InProgress() bool { return p.havePrefix || p.avail > 0 }

// Need reports how many more bytes the current message needs, or 0 when
// none has begun; the engine may use it to open the flow-control window
// for a whole large message at once.
func (p *Parser) Need() int {
	if !p.havePrefix {
		return 0
	}
	if p.length > p.avail {
		return p.length - p.avail
	}
	return 0
}

// Next returns the next complete message, decompressed when its flag says
// compressed (see SetEncoding and inflate). ok is false when more data is
// needed. Errors are status errors: ResourceExhausted for a message over
// MaxRecv (before or after decompression), Internal for an unknown flag
// value, a compressed flag without a known encoding or data that does not
// decompress. After an error the Parser must be Closed.
func (p *Parser) Next() (msg Message, ok bool, err error) {
	if !p.havePrefix && p.spec {
		if p.asm == nil {
			if p.avail == 0 {
				return Message{}, false, nil
			}
			p.spec, p.base = false, 0 // the bytes came as payloads: no guess this time
		} else if p.asmN < PrefixLen {
			return Message{}, false, nil
		} else if pre := p.asm.Bytes()[:PrefixLen]; int(binary.BigEndian.Uint32(pre[1:])) == p.guess {
			// Guessed right: the message is gathered in place.
			p.spec = false
			p.avail -= PrefixLen
			p.flag, p.length = pre[0], p.guess
			p.havePrefix = true
		} else {
			p.unguess()
		}
	}
	if !p.havePrefix {
		if p.avail < PrefixLen {
			return Message{}, false, nil
		}
		var pre [PrefixLen]byte
		p.read(pre[:])
		p.flag = pre[0]
		p.length = int(binary.BigEndian.Uint32(pre[1:]))
		p.havePrefix = true
		p.announced = false
		if p.flag > 1 {
			return Message{}, false, status.Errorf(codes.Internal, "grpc: received unexpected payload format %d", p.flag)
		}
		max := p.MaxRecv
		if max <= 0 {
			max = DefaultMaxRecvMsgSize
		}
		if p.length > max {
			return Message{}, false, status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", p.length, max)
		}
	}
	if p.avail < p.length {
		if p.asm == nil && p.avail > 0 {
			// The message spans payloads: gather it from here on,
			// letting its frames land in the buffer (Sink). One of which
			// nothing has arrived holds no buffer: a short one may still
			// come in one payload, viewed without a copy, and for a large
			// one (gatherEarly) Sink asks the transport to take the
			// buffer when its bytes come.
			p.gather()
		}
		return Message{}, false, nil
	}
	msg.Compressed = p.flag == 1
	if p.asm != nil {
		p.avail -= p.length
		p.deliver(&msg, p.asm, p.base, p.base+p.length)
		p.asm, p.asmN, p.base = nil, 0, 0
	} else {
		p.take(&msg, p.length)
	}
	p.havePrefix = false
	p.guess = 0
	if p.length >= gatherEarly {
		p.guess = p.length
	}
	if msg.Compressed {
		if msg, err = p.inflate(msg); err != nil {
			return Message{}, false, err
		}
	}
	return msg, true, nil
}

// unguess gives up a guessed buffer whose prefix announced another length:
// its bytes are copied to the head of the queue (they precede whatever was
// queued), and the buffer stays as stale for what the transport may still
// land there.
func (p *Parser) unguess() {
	if p.off > 0 && len(p.q) > 0 {
		// fill took the head of the first queued payload (the guessed
		// buffer's last bytes, pushed with the rest of the next message
		// behind them): what is unread of it becomes a chunk of its own,
		// so that the copied-out head goes in front with nothing read.
		rest := p.pool().Copy(p.q[0].bytes()[p.off:])
		p.q[0].free()
		p.q[0] = chunk{b: rest}
		if !mem.IsBelowBufferPoolingThreshold(rest.Len()) {
			p.q[0] = chunk{m: rest.Mem()}
		}
		p.off = 0
	}
	head := p.pool().Copy(p.asm.Bytes()[:p.asmN])
	c := chunk{b: head}
	if !mem.IsBelowBufferPoolingThreshold(head.Len()) {
		c = chunk{m: head.Mem()}
	}
	if p.q == nil {
		p.q = p.qbuf[:0]
	}
	p.q = append(p.q, chunk{})
	copy(p.q[1:], p.q) // nothing queued was read yet (off is 0)
	p.q[0] = c         // avail already counts its bytes
	p.stale, p.staleN = p.asm, p.asmN
	if p.staleN == p.stale.Len() {
		p.dropStale()
	}
	p.asm, p.asmN, p.spec, p.base = nil, 0, false, 0
}

// gatherEarly is the message length from which Sink offers a range for the
// message before any byte of it has arrived. Frames of such messages are read into
// the gathering buffer (h2frame's sinkMinData and up) at the cost of the one
// copy out of the read buffer a payload of its own costs anyway, so
// gathering never costs a copy more than viewing.
const gatherEarly = 4 << 10

// gather starts gathering the current message into one pooled buffer,
// moving every queued byte (all of them belong to it) there. The buffer
// holds the whole message when the peer may send it all under the window
// on top of what arrived (a 1 MiB message at the default window), else it
// grows as the bytes come.
func (p *Parser) gather() {
	n := p.avail
	p.asm, p.base = p.pool().Get(p.gatherSize(p.length, n, 0)), 0
	p.asm.SetLen(min(p.length, p.asm.Cap()))
	p.read(p.asm.Bytes()[:n])
	p.asmN = n
	p.avail = n
}

// deliver sets msg.Data to b's bytes [lo, hi). It takes ownership of b.
func (p *Parser) deliver(msg *Message, b *bufpool.Buffer, lo, hi int) {
	if mem.IsBelowBufferPoolingThreshold(hi - lo) {
		msg.release = b // the message's reference, dropped by Message.Free
		p.one[0] = mem.SliceBuffer(b.Bytes()[lo:hi])
	} else {
		msg.gathered = b
		p.one[0] = b.MemRange(lo, hi)
	}
	msg.Data = p.one[:]
}

// read copies len(dst) bytes out of the queue; avail must cover them.
func (p *Parser) read(dst []byte) {
	for len(dst) > 0 {
		n := copy(dst, p.q[0].bytes()[p.off:])
		dst = dst[n:]
		p.consume(n)
	}
}

// consume drops n bytes from the head of q[0].
func (p *Parser) consume(n int) {
	p.off += n
	p.avail -= n
	if p.off == len(p.q[0].bytes()) {
		p.q[0].free() // the parser's reference; views taken from it hold their own
		p.q[0] = chunk{}
		p.q = p.q[1:]
		p.off = 0
		if len(p.q) == 0 {
			p.q = nil // the next push starts over at qbuf
		}
	}
}

// take sets msg.Data to the next n bytes of the queue, as views of the
// queued buffers.
func (p *Parser) take(msg *Message, n int) {
	if n == 0 {
		return
	}
	if head := p.q[0]; len(head.bytes())-p.off >= n {
		if head.b != nil {
			head.b.Ref() // the message's reference, dropped by Message.Free
			msg.release = head.b
			p.view.SliceBuffer = head.b.Bytes()[p.off : p.off+n]
			p.one[0] = &p.view // no allocation, unlike boxing a SliceBuffer
		} else {
			p.one[0] = head.m.Slice(p.off, p.off+n)
		}
		msg.Data = p.one[:]
		p.consume(n)
		return
	}
	// Spanning queued payloads: gathered into one buffer.
	b := p.pool().Get(n)
	p.read(b.Bytes())
	p.deliver(msg, b, 0, n)
}

// Close frees every held buffer.
func (p *Parser) Close() {
	for i, c := range p.q {
		c.free()
		p.q[i] = chunk{}
	}
	p.q = nil
	p.one[0] = nil
	p.view.SliceBuffer = nil
	if p.asm != nil {
		p.asm.Free()
		p.asm, p.asmN = nil, 0
	}
	p.dropStale()
	p.off, p.avail, p.havePrefix, p.spec, p.base = 0, 0, false, false, 0
}

// ErrTruncated is the status of a stream that ended inside a message.
var ErrTruncated = status.Error(codes.Internal, "grpc: stream ended with an incomplete message")

// EncodeMessage marshals msg with codec and returns the 5-byte prefix and
// the payload. The payload is what the codec returned (from pool when the
// codec uses it), not a copy: the caller owns it and must Free it. A
// payload over maxSend is a ResourceExhausted status error.
func EncodeMessage(codec encoding.CodecV2, msg any, maxSend int) (prefix [PrefixLen]byte, data mem.BufferSlice, err error) {
	data, err = codec.Marshal(msg)
	if err != nil {
		data.Free()
		return prefix, nil, status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	n := data.Len()
	if maxSend <= 0 {
		maxSend = DefaultMaxSendMsgSize
	}
	if n > maxSend {
		data.Free()
		return prefix, nil, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", n, maxSend)
	}
	if uint64(n) > math.MaxUint32 {
		data.Free()
		return prefix, nil, status.Errorf(codes.ResourceExhausted, "grpc: message too large (%d bytes)", n)
	}
	PutPrefix(prefix[:], false, uint32(n))
	return prefix, data, nil
}

// DecodeMessage unmarshals a received message with codec. It takes
// ownership of m, a message as Next returns it (decompressed already). A
// codec other than grpc-go's proto codec may keep the data by taking
// references (CodecV2): it gets reference-counted buffers, or for a small
// message a copy of its own. With alias set, a large message that grpc-go's
// proto codec would decode is decoded so that its large bytes fields alias
// the buffer it was gathered in, which then leaves the pool (decodeAliased).
func DecodeMessage(codec encoding.CodecV2, m Message, dst any, alias bool) error {
	if alias && m.gathered != nil && codec == protoCodec {
		if done, err := decodeAliased(m, dst); done {
			return err
		}
	}
	if m.release != nil && codec != protoCodec {
		// A small message is a view whose Ref does nothing over a
		// pooled buffer Free hands back: fine for grpc-go's proto codec,
		// which keeps nothing, but a codec may keep the data with a Ref
		// (CodecV2), so any other gets bytes of its own.
		b := m.Data.Materialize()
		m.Free()
		m.Data = mem.BufferSlice{mem.SliceBuffer(b)}
	}
	err := codec.Unmarshal(m.Data, dst)
	m.Free()
	if err != nil {
		return unmarshalError(err)
	}
	return nil
}

func unmarshalError(err error) error {
	return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
}

// nextPayload returns st's next payload for p (an owned buffer), or nil
// once DATA landed straight in the message p gathers: where p offers a
// place for the bytes (Sink) they are received into it (RecvInto), else as
// a payload of their own (Recv).
func nextPayload(p *Parser, st *h2conn.Stream) (*bufpool.Buffer, error) {
	dst, from, to := p.Sink()
	if to == 0 {
		return st.Recv()
	}
	b, n, err := st.RecvInto(dst, from, to)
	if n > 0 {
		p.Landed(b, n) // takes ownership of b, a buffer taken for a nil dst
		return nil, err
	}
	return b, err
}
