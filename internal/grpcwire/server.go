package grpcwire

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ServerConfig is what the server glue needs from the server's options.
type ServerConfig struct {
	Pool    *bufpool.Pool // nil: bufpool.Default()
	MaxRecv int           // 0: DefaultMaxRecvMsgSize
	MaxSend int           // 0: unlimited
	// AliasBytes lets the large bytes fields of received messages alias
	// the buffers they arrived in (DecodeMessage).
	AliasBytes bool
	// Codec, when set, decodes and encodes every call's messages whatever
	// the request's content-subtype (grpc-go's ForceServerCodec); the
	// response's content-type still echoes the request's.
	Codec encoding.CodecV2
}

// ServerStream is the gRPC server side of one HTTP/2 stream: the request,
// the handler's context and the sending and receiving of messages, headers
// and the final status. RecvMsg is used by one goroutine, SendMsg by one
// (possibly another); header and trailer calls may come from either.
type ServerStream struct {
	st    *h2conn.Stream // nil when tr carries the call
	tr    Transport
	Req   Request
	Codec encoding.CodecV2
	pool  *bufpool.Pool

	maxSend int
	ctx     context.Context // what Context returns: &Ctx, or what SetContext set

	// Ctx is the handler context's cancelable part (see CallContext).
	Ctx CallContext

	// Receive side, owned by the goroutine calling RecvMsg. The parser
	// comes from parsers at Init and goes back when st is released, so
	// that it is not part of every call's allocation; nil after.
	parser  *Parser
	recvErr error
	recvEOF bool
	alias   bool // ServerConfig.AliasBytes

	// mdOnce follows recvEOF to use the bytes after it: the per-call rpc
	// that holds a ServerStream fills its allocation size class exactly.
	mdOnce sync.Once
	md     metadata.MD // built by IncomingMD from Req's pairs

	mu      sync.Mutex // guards the fields below
	header  metadata.MD
	trailer metadata.MD
	// users counts the calls using st outside mu (a send, a receive,
	// FinishHTTP): st is released by the last to leave once finished is
	// set, so that a SendMsg or RecvMsg racing with or following the end
	// of the call never reaches a stream object the connection reuses.
	// (Declared ahead of the flags so that they share one word.)
	users      int
	headerSent bool
	finished   bool
	expired    bool // the deadline had passed when Init ran
	recvIn     bool // a receive is among users
	released   bool
	// comp is the compression of the response messages: the request's
	// encoding when its compressor is registered, or what
	// SetSendCompressor chose; nil sends them as they are, with no
	// grpc-encoding. Set before the handler runs or by it (not
	// concurrently with SendMsg, as grpc-go's SetSendCompressor says),
	// fixed once the headers went out.
	comp *sendCompression
	// last is SendLastMsg's message, left for finish to send with the
	// response headers and the trailers as one item of the stream
	// (h2conn.ResponseItem): headerSent is set meanwhile.
	last *bufpool.Buffer
}

// fieldBuf is the scratch a response's header or trailer fields are built
// in, used until the engine has encoded them (Send returns after that, or
// has the engine copy them when it returns earlier). It
// comes from fieldBufs for that long
// rather than living in every call's ServerStream: 320 bytes less to
// allocate, zero and collect per call (the garbage collector's work is a
// visible part of a single call's CPU).
type fieldBuf [8]hpack.HeaderField

var fieldBufs = sync.Pool{New: func() any { return new(fieldBuf) }}

// parsers holds the Parsers of released ServerStreams, zeroed.
var parsers = sync.Pool{New: func() any { return new(Parser) }}

// NewServerStream prepares a gRPC stream for a request ParseRequest
// accepted. It must be called from h2conn.Handler.HandleStream (on the
// reader), before the stream can end, so that a RST_STREAM from the client
// cancels the context. The context derives from parent, carries the
// request's deadline, and ends when the client resets the stream or the
// connection closes; when the deadline passes the stream is reset with
// CANCEL.
func NewServerStream(parent context.Context, st *h2conn.Stream, req Request, cfg *ServerConfig) *ServerStream {
	s := new(ServerStream)
	s.Init(parent, st, req, cfg)
	return s
}

// Init is NewServerStream for a ServerStream embedded in a larger object,
// which saves an allocation per RPC. s must be zero.
func (s *ServerStream) Init(parent context.Context, st *h2conn.Stream, req Request, cfg *ServerConfig) {
	s.InitUnregistered(parent, st, req, cfg)
	st.SetResetHandler(s)
}

// InitUnregistered is Init without registering s as st's reset handler:
// the caller calls Register before it hands the stream on, which for a
// unary call registers its h2conn.ArrivalHandler in the same round trip
// of the engine lock. Until then a reset does not end s's context.
func (s *ServerStream) InitUnregistered(parent context.Context, st *h2conn.Stream, req Request, cfg *ServerConfig) {
	s.st = st
	s.init(parent, req, cfg)
}

// InitTransport is Init for a call that a Transport carries rather than
// one of the engine's streams (a web protocol, or gRPC under net/http).
// The transport reports an abnormal end of the exchange by calling
// StreamReset.
func (s *ServerStream) InitTransport(parent context.Context, tr Transport, req Request, cfg *ServerConfig) {
	s.tr = tr
	s.init(parent, req, cfg)
}

func (s *ServerStream) init(parent context.Context, req Request, cfg *ServerConfig) {
	s.Req, s.maxSend, s.pool, s.alias = req, cfg.MaxSend, cfg.Pool, cfg.AliasBytes
	if s.pool == nil {
		s.pool = bufpool.Default()
	}
	s.parser = parsers.Get().(*Parser)
	s.parser.MaxRecv = cfg.MaxRecv
	s.parser.Pool = s.pool
	if s.Codec = cfg.Codec; s.Codec == nil {
		var ok bool
		if s.Codec, ok = CodecFor(req.ContentSubtype); !ok && req.ContentSubtype == "json" {
			s.Codec = JSONCodec
		}
	}
	if req.Encoding != "" {
		s.initCompression()
	}
	s.ctx = &s.Ctx
	var onDeadline func()
	if req.HasTimeout {
		onDeadline = s.onDeadline // a method value: only with a deadline
	}
	s.expired = !s.Ctx.init(parent, req.Timeout, req.HasTimeout, onDeadline)
}

// Register registers s as its stream's reset handler after
// InitUnregistered and, when a is not nil, a as the stream's arrival
// handler (h2conn.Stream.SetHandlers); it reports whether a waits for the
// request.
func (s *ServerStream) Register(a h2conn.ArrivalHandler) bool { return s.st.SetHandlers(s, a) }

// The stream's operations, on the engine's stream or the Transport.

func (s *ServerStream) send(it h2conn.SendItem) error {
	if s.tr != nil {
		return s.tr.Send(it)
	}
	return s.st.Send(it)
}

func (s *ServerStream) reset(code h2frame.ErrCode) {
	if s.tr != nil {
		s.tr.Reset(code)
		return
	}
	s.st.Reset(code)
}

func (s *ServerStream) release() {
	if s.tr != nil {
		s.tr.Release()
		return
	}
	s.st.Release()
}

func (s *ServerStream) headersSent() bool {
	if s.tr != nil {
		return s.tr.HeadersSent()
	}
	return s.st.HeadersSent()
}

func (s *ServerStream) streamDone() <-chan struct{} {
	if s.tr != nil {
		return s.tr.Done()
	}
	return s.st.Done()
}

func (s *ServerStream) streamErr() error {
	if s.tr != nil {
		return s.tr.Err()
	}
	return s.st.Err()
}

// Expired reports whether the request's deadline had passed when the
// stream was prepared (a grpc-timeout of zero): the context has ended with
// DeadlineExceeded and the call should be answered with DEADLINE_EXCEEDED
// without running its handler, as grpc-go does.
func (s *ServerStream) Expired() bool { return s.expired }

// lateErr is what a send or receive returns once the call has ended:
// grpc-go's server transport answers with the context's error then.
func (s *ServerStream) lateErr() error {
	err := s.Ctx.Err()
	if err == nil {
		err = context.Canceled // the end of the call is cancelling it
	}
	return status.FromContextError(err).Err()
}

// enterLocked registers a user of st, a receive when recv; it fails once
// the call has finished. s.mu must be held.
func (s *ServerStream) enterLocked(recv bool) error {
	if s.finished {
		return s.lateErr()
	}
	s.users++
	if recv {
		s.recvIn = true
	}
	return nil
}

// leave unregisters a user of st, releasing st if it is the last one of a
// finished call.
func (s *ServerStream) leave(recv bool) {
	s.mu.Lock()
	s.users--
	if recv {
		s.recvIn = false
	}
	last := s.users == 0 && s.finished && !s.released
	if last {
		s.released = true
	}
	s.mu.Unlock()
	if last {
		// No receive runs any more, and none starts (a receive stays a
		// user until its message is decoded): the parser is free.
		p := s.parser
		s.parser = nil
		p.Close()
		s.release()
		*p = Parser{}
		parsers.Put(p)
	}
}

// onDeadline runs once the request's deadline passed: the stream is reset
// with CANCEL unless the status went out.
func (s *ServerStream) onDeadline() {
	s.mu.Lock()
	if !s.finished {
		s.reset(h2frame.ErrCodeCancel)
	}
	s.mu.Unlock()
}

// StreamReset is the stream's h2conn.ResetHandler: when the stream ends
// abnormally the handler's context ends.
func (s *ServerStream) StreamReset(error) { s.Ctx.cancel(context.Canceled) }

// SetContext makes ctx what Context returns and what errors are judged by:
// a context whose Deadline, Done, Err and AfterFunc are s.Ctx's, with more
// values. Call it before s is shared with another goroutine.
func (s *ServerStream) SetContext(ctx context.Context) { s.ctx = ctx }

// RequestWireLength is the payload length of the HEADERS frame that
// opened the call (stats.InHeader's WireLength).
func (s *ServerStream) RequestWireLength() int {
	if s.tr != nil {
		return 0 // no HPACK-encoded HEADERS frame
	}
	return s.st.HeadersWireLength()
}

// IncomingMD returns the request's metadata as grpc-go shows handlers
// (custom fields, plus :authority, user-agent, content-type and
// grpc-accept-encoding); the map is built on the first call, from the
// fields ParseRequestScratch kept, or is Req.MD when that was filled.
func (s *ServerStream) IncomingMD() metadata.MD { return s.IncomingMDShared(nil) }

// IncomingMDShared is IncomingMD with the map taken from cache, the
// server's, when the call's fields are those of the map cached there
// (nil: built for the call). The map may then be shared with other calls:
// it must not be written to (MDCache).
func (s *ServerStream) IncomingMDShared(cache *MDCache) metadata.MD {
	s.mdOnce.Do(func() {
		switch {
		case s.Req.MD != nil:
			s.md = s.Req.MD
		case cache != nil:
			s.md = cache.get(&s.Req)
		default:
			s.md = s.Req.BuildMD()
		}
	})
	return s.md
}

// Context returns the handler's context.
func (s *ServerStream) Context() context.Context { return s.ctx }

// Stream returns the underlying HTTP/2 stream; nil for a call a
// Transport carries.
func (s *ServerStream) Stream() *h2conn.Stream { return s.st }

// Transport returns the Transport that carries the call; nil for a call
// on the engine's stream.
func (s *ServerStream) Transport() Transport { return s.tr }

// SetHeader merges md into the response headers to send.
func (s *ServerStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headerSent || s.finished {
		return status.Error(codes.Internal, "transport: SetHeader called after headers were sent")
	}
	s.header = metadata.Join(s.header, md)
	return nil
}

// SendHeader sends the response headers with md merged in.
func (s *ServerStream) SendHeader(md metadata.MD) error {
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		return s.lateErr() // as grpc-go's transport, once the stream is done
	}
	if s.headerSent {
		s.mu.Unlock()
		return status.Error(codes.Internal, "transport: SendHeader called multiple times")
	}
	s.header = metadata.Join(s.header, md)
	err := s.sendHeaderLocked()
	s.mu.Unlock()
	return err
}

// sendHeaderLocked sends the response headers on their own.
func (s *ServerStream) sendHeaderLocked() error {
	s.headerSent = true
	fb := fieldBufs.Get().(*fieldBuf)
	var enc string
	if s.comp != nil {
		enc = s.comp.name
	}
	fields := AppendResponseHeaders(fb[:0], s.Req.ContentSubtype, enc, s.header)
	err := s.send(h2conn.HeadersItem(fields, false))
	clear(fb[:])
	fieldBufs.Put(fb)
	if err != nil {
		if e := s.headerListErr(err); e != nil {
			return e
		}
		return StreamStatusError(s.ctx, err)
	}
	return nil
}

// sendHeaderDataLocked sends the response headers and b, a message, as
// one item (h2conn.HeadersDataItem), held for the trailers when last; it
// takes ownership of b. sent says whether the headers went out.
func (s *ServerStream) sendHeaderDataLocked(b *bufpool.Buffer, last bool) (sent bool, err error) {
	s.headerSent = true
	fb := fieldBufs.Get().(*fieldBuf)
	var enc string
	if s.comp != nil {
		enc = s.comp.name
	}
	fields := AppendResponseHeaders(fb[:0], s.Req.ContentSubtype, enc, s.header)
	it := h2conn.HeadersDataItem(fields, b, false) // takes ownership of b
	it.Hold = last                                 // Finish follows at once
	err = s.send(it)
	clear(fb[:])
	fieldBufs.Put(fb)
	if err != nil {
		sent = s.headersSent()
		if e := s.headerListErr(err); e != nil {
			return false, e
		}
		if !sent {
			return false, StreamStatusError(s.ctx, err)
		}
		return true, s.statusError(err)
	}
	return true, nil
}

// errHeaderListTooLarge is what a handler's send of headers over the
// client's header list limit returns, with grpc-go's code and message.
var errHeaderListTooLarge = status.Error(codes.Unknown, "transport: trying to send header list size larger than the limit set by peer")

// headerListErr answers a response header list over the client's
// SETTINGS_MAX_HEADER_LIST_SIZE (h2conn checked it, nothing was sent) as
// grpc-go's server does: RST_STREAM INTERNAL_ERROR, so the client sees
// Internal and its connection lives on. It returns nil for other errors.
func (s *ServerStream) headerListErr(err error) error {
	var hl *h2conn.HeaderListTooLargeError
	if !errors.As(err, &hl) {
		return nil
	}
	s.reset(h2frame.ErrCodeInternal)
	return errHeaderListTooLarge
}

// SetTrailer merges md into the trailers sent with the status.
func (s *ServerStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return status.Error(codes.Internal, "transport: SetTrailer called after the status was sent")
	}
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// SendMsg sends one message, sending the response headers first if they
// were not (in the same syscall).
func (s *ServerStream) SendMsg(m any) error {
	_, _, err := s.sendMsg(m, false)
	return err
}

// SendLastMsg is SendMsg for a message that Finish follows at once (a
// unary response): headers, message and trailers leave in one syscall.
func (s *ServerStream) SendLastMsg(m any) error {
	_, _, err := s.sendMsg(m, true)
	return err
}

// SendMsgSized is SendMsg (SendLastMsg when last) for a caller that
// reports what went out (stats handlers): n is the message's size, and
// sentHeader says that this call sent the response headers ahead of it.
func (s *ServerStream) SendMsgSized(m any, last bool) (n MsgSize, sentHeader bool, err error) {
	return s.sendMsg(m, last)
}

func (s *ServerStream) sendMsg(m any, last bool) (n MsgSize, sentHeader bool, err error) {
	c := s.comp
	var b *bufpool.Buffer
	var pc *pieces
	if c == nil || c.comp == nil {
		if b, pc, err = encodeForWire(s.pool, s.Codec, m, s.maxSend); err == nil {
			if pc != nil {
				n.Len = pc.size
			} else {
				n.Len = b.Len() - PrefixLen
			}
			n.Wire = n.Len
		}
	} else {
		b, n, err = EncodeCompressed(s.pool, s.Codec, c.comp, m, s.maxSend)
	}
	if err != nil {
		return MsgSize{}, false, err
	}
	if pc != nil {
		return s.sendPieces(pc, n, c)
	}
	s.mu.Lock()
	if err := s.enterLocked(false); err != nil {
		s.mu.Unlock()
		b.Free()
		return MsgSize{}, false, err
	}
	if !s.headerSent {
		// The headers name the compressor the message was compressed
		// with, even if a SetSendCompressor broke its contract and ran
		// meanwhile. Written only then: concurrent SendMsgs (misuse, but
		// refused cleanly) read it outside mu.
		if s.comp != c {
			s.comp = c
		}
		if last {
			// A unary response: the status follows at once, and the
			// three go as one item, so that the handler waits for the
			// connection's writer once, not twice.
			s.headerSent, s.last = true, b
			s.mu.Unlock()
			s.leave(false)
			return n, true, nil
		}
		// The headers and the message go as one write (one round trip
		// of the engine lock and one wait for its writer).
		sentHeader, err = s.sendHeaderDataLocked(b, last)
		s.mu.Unlock()
		s.leave(false)
		if err != nil {
			return MsgSize{}, sentHeader, err
		}
		return n, true, nil
	}
	s.mu.Unlock()
	it := h2conn.DataItem(b, false) // takes ownership of b
	it.Hold = last                  // Finish follows at once
	err = s.send(it)
	s.leave(false)
	if err != nil {
		return MsgSize{}, sentHeader, s.statusError(err)
	}
	return n, sentHeader, nil
}

// sendPieces is sendMsg for a message marshaled in pieces (pieces.go),
// whose size is n, not compressed (c is the compressor state sendMsg
// found). The first piece goes with the response headers when they were
// not sent; nothing is held for the trailers, since the pieces must reach
// the socket before SendMsg returns.
func (s *ServerStream) sendPieces(pc *pieces, n MsgSize, c *sendCompression) (MsgSize, bool, error) {
	s.mu.Lock()
	if err := s.enterLocked(false); err != nil {
		s.mu.Unlock()
		pc.drop()
		return MsgSize{}, false, err
	}
	sentHeader := false
	if !s.headerSent {
		if s.comp != c {
			s.comp = c // as sendMsg: the headers name what the message was sent with
		}
		var err error
		sentHeader, err = s.sendHeaderDataLocked(pc.takeFirst(), false)
		s.mu.Unlock()
		if err != nil {
			s.leave(false)
			pc.drop()
			return MsgSize{}, sentHeader, err
		}
	} else {
		s.mu.Unlock()
	}
	err := pc.send((*streamSender)(s), false)
	s.leave(false)
	if err != nil {
		return MsgSize{}, sentHeader, s.statusError(err)
	}
	return n, sentHeader, nil
}

// HeaderMD returns a copy of the response header metadata set or sent so
// far (what a stats handler's OutHeader shows).
func (s *ServerStream) HeaderMD() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header.Copy()
}

// TrailerMD returns a copy of the trailer metadata set so far.
func (s *ServerStream) TrailerMD() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trailer.Copy()
}

// RecvMsg receives the next message into m; io.EOF when the client
// half-closed after its last message.
func (s *ServerStream) RecvMsg(m any) error {
	_, err := s.recvMsg(m, false)
	return err
}

// RecvMsgSized is RecvMsg that also returns the size of the message
// received.
func (s *ServerStream) RecvMsgSized(m any) (n MsgSize, err error) { return s.recvMsg(m, true) }

// recvMsg receives into m; the size is measured only when sized (an
// interface call on the message's buffer that RecvMsg does not pay).
func (s *ServerStream) recvMsg(m any, sized bool) (n MsgSize, err error) {
	if err := s.enterRecv(); err != nil {
		return MsgSize{}, err
	}
	// A user until the message is decoded: it may be a view into the
	// parser, which the last user's leave gives back.
	defer s.leave(true)
	msg, err := s.recvEntered()
	if err != nil {
		return MsgSize{}, err
	}
	if sized {
		n = msg.size()
	}
	return n, DecodeMessage(s.Codec, msg, m, s.alias)
}

// enterRecv registers the caller as a receiving user (see leave), or
// returns why it cannot receive: an earlier receive error, or the end of
// the call.
func (s *ServerStream) enterRecv() error {
	if s.recvErr != nil {
		return s.recvErr
	}
	s.mu.Lock()
	err := s.enterLocked(true)
	s.mu.Unlock()
	return err
}

// recvEntered returns the next message (the caller owns msg.Data) to a
// caller registered as a receiving user (enterRecv), who leaves after it
// is done with the message.
// statusError is StreamStatusError for the handler: a stream the client
// reset reads as the handler's context canceled, as grpc-go's server
// reports it (it cancels the context and its receives report that),
// also when the receive sees the reset before the context's cancellation
// has run.
func (s *ServerStream) statusError(err error) error {
	var he *h2conn.Error
	if s.ctx.Err() == nil && errors.As(err, &he) && he.StreamID != 0 && he.Initiator == h2conn.InitiatorPeer && !he.Unprocessed {
		return status.FromContextError(context.Canceled).Err()
	}
	return StreamStatusError(s.ctx, err)
}

func (s *ServerStream) recvEntered() (Message, error) {
	for {
		msg, ok, err := s.parser.Next()
		if err != nil {
			s.recvErr = err
			return Message{}, err
		}
		if ok {
			return msg, nil
		}
		if s.recvEOF {
			if s.parser.InProgress() {
				s.recvErr = ErrTruncated
			} else {
				s.recvErr = io.EOF
			}
			return Message{}, s.recvErr
		}
		if n := s.parser.TakeExpect(); n > 0 && s.tr == nil {
			s.st.ExpectMessage(n)
		}
		b, err := s.recvPayload()
		if err == io.EOF {
			s.recvEOF = true
			continue
		}
		if err != nil {
			s.recvErr = s.statusError(err)
			return Message{}, s.recvErr
		}
		s.parser.Push(b) // takes ownership of b
	}
}

// Finish sends the status with the trailers set so far (a Trailers-Only
// response when no headers were sent or set), resets the stream with NO_ERROR if
// the client has not half-closed, ends the context, and releases the
// stream's resources once no SendMsg or RecvMsg uses them; those fail from
// now on with the context's status (Canceled), as grpc-go's do after the
// handler returned. Later calls do nothing.
func (s *ServerStream) Finish(st *status.Status) error {
	return s.FinishHTTP(st, 0)
}

// FinishUnstarted is Finish for a call whose handler never ran because its
// context ended first: when the stream has ended too (reset by the client,
// by the deadline, or by the connection's end) nothing can be written and
// the call only gives its resources back, without encoding a status no
// one will read (a client resetting streams in a flood pays for each);
// otherwise the status goes out as Finish sends it.
func (s *ServerStream) FinishUnstarted(st *status.Status) {
	if s.streamErr() == nil {
		s.Finish(st)
		return
	}
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		return
	}
	s.finished = true
	s.users++ // a user of st until its leave, as in finish
	s.mu.Unlock()
	s.Ctx.cancel(context.Canceled)
	s.leave(false)
}

// FinishHTTP is Finish with an HTTP status for a Trailers-Only response
// (0 means 200).
func (s *ServerStream) FinishHTTP(st *status.Status, httpStatus int) error {
	_, _, err := s.finish(st, httpStatus)
	return err
}

// FinishSized is Finish for a caller that reports what went out (stats
// handlers): sentHeader says that this call sent response headers of their
// own (header metadata was set and no message went out), sentStatus that
// it wrote the status, which it does not when the call had finished or the
// stream had ended (a reset, the deadline).
func (s *ServerStream) FinishSized(st *status.Status) (sentHeader, sentStatus bool, err error) {
	return s.finish(st, 0)
}

func (s *ServerStream) finish(st *status.Status, httpStatus int) (sentHeader, sentStatus bool, err error) {
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		return false, false, nil
	}
	resp := s.last // the unary response, which goes with an OK status
	s.last = nil
	if resp != nil && (st.Code() != codes.OK || httpStatus != 0) {
		// The call failed after all (its deadline passed): the status
		// goes without the message, in a Trailers-Only response.
		resp.Free()
		resp, s.headerSent = nil, false
	}
	if !s.headerSent && len(s.header) > 0 && httpStatus == 0 {
		// Header metadata set with no message sent: it goes in HEADERS of
		// its own ahead of the trailers, as grpc-go sends it, rather than
		// being lost in a Trailers-Only response. A failure shows in the
		// trailers' write below.
		sentHeader = s.sendHeaderLocked() == nil
	}
	s.finished = true
	s.users++ // this call is a user of st until its leave
	// recvEOF is the receiver's: read it only when no receive runs. A
	// receive that runs is woken by the reset below.
	recvDone := !s.recvIn && s.recvEOF
	fb := fieldBufs.Get().(*fieldBuf)
	fields := AppendTrailers(fb[:0], !s.headerSent, httpStatus, s.Req.ContentSubtype, st, s.trailer)
	var hb *fieldBuf
	var hfields []hpack.HeaderField
	if resp != nil {
		hb = fieldBufs.Get().(*fieldBuf)
		var enc string
		if s.comp != nil {
			enc = s.comp.name
		}
		hfields = AppendResponseHeaders(hb[:0], s.Req.ContentSubtype, enc, s.header)
	}
	s.headerSent = true
	s.mu.Unlock()
	// The deadline watcher checks finished under mu, so it does not
	// reset st once it is released.
	switch {
	case resp != nil && recvDone:
		// The request has ended, so nothing follows the response: when
		// another goroutine is writing, it sends it without this one
		// waiting, and the stream's release waits for it instead.
		it := h2conn.ResponseItem(hfields, resp, fields) // takes ownership of resp
		it.Return = h2conn.ReturnHandedOver
		err = s.send(it)
		clear(hb[:])
		fieldBufs.Put(hb)
	case resp != nil:
		err = s.send(h2conn.ResponseItem(hfields, resp, fields)) // takes ownership of resp
		clear(hb[:])
		fieldBufs.Put(hb)
	default:
		err = s.send(h2conn.TrailersItem(fields))
	}
	clear(fb[:])
	fieldBufs.Put(fb)
	if err == h2conn.ErrConcurrentWrite {
		// A SendMsg from a goroutine the handler left behind still waits
		// for window: the status cannot follow its message, so the stream
		// ends with a reset.
		s.reset(h2frame.ErrCodeInternal)
	}
	if err != nil {
		if e := s.headerListErr(err); e != nil {
			err = e
		}
	} else if !recvDone {
		select {
		case <-s.streamDone():
		default:
			s.reset(h2frame.ErrCodeNo)
		}
	}
	s.Ctx.cancel(context.Canceled)
	s.leave(false)
	if err != nil {
		return sentHeader, false, StreamStatusError(s.ctx, err)
	}
	return sentHeader, true, nil
}

// RejectStream answers a request ParseRequest refused: RST_STREAM; a plain
// HTTP response (HEADERS with the HTTP status, then a short text body) for
// a request that is not gRPC; or a Trailers-Only response with the HTTP
// status (and a reset with NO_ERROR when the client has not finished
// sending). It may block briefly on the connection's writer, and after a
// plain answer until the client ends its request (bounded by
// rejectDrainBytes and rejectDrainTimeout), so call it off the reader
// goroutine.
func RejectStream(st *h2conn.Stream, req *Request, rej *Reject) {
	if rej.RST {
		st.Reset(rej.Code)
		st.Release()
		return
	}
	if rej.Plain {
		rejectPlain(st, rej)
		st.Release()
		return
	}
	var buf [6]hpack.HeaderField
	fields := AppendTrailers(buf[:0], true, rej.HTTPStatus, req.ContentSubtype, rej.Status, nil)
	if err := st.Send(h2conn.TrailersItem(fields)); err == nil {
		select {
		case <-st.Done():
		default:
			st.Reset(h2frame.ErrCodeNo)
		}
	}
	st.Release()
}

// The client of a request answered with a plain HTTP response may go on
// sending its body. The response's END_STREAM waits for the request's: the
// stream stays open while the client sends, so it keeps counting against
// MAX_CONCURRENT_STREAMS and the engine keeps checking its content-length
// and flow control, as an HTTP/2 server must (h2spec 5.1.2, 6.9.1, 8.1.2.6;
// the engine resets a stream whose response ends before its request, RFC
// 9113 §8.1). Reading returns window to the client, so nothing else bounds
// what it may send: past rejectDrainBytes or rejectDrainTimeout the
// response ends at once, which makes the engine reset the stream with
// NO_ERROR. So does rejectDrainIdle without a byte from the client: a
// client may stop sending when it sees the error status (Go's HTTP/2
// transport abandons its request body on a status of 300 or more), and
// would otherwise wait for the response's end as long as the server
// waits for the request's.
const (
	rejectDrainBytes   = 256 << 10
	rejectDrainTimeout = 10 * time.Second
	rejectDrainIdle    = 250 * time.Millisecond
)

// rejectPlain sends a plain HTTP response to a request that is not gRPC,
// as net/http's Error does: the status, a text/plain content-type and the
// reason as the body. The gRPC status goes in the headers too, so a gRPC
// client learns why. It discards the request body until the client ends
// it, then ends the response (see rejectDrainBytes).
func rejectPlain(st *h2conn.Stream, rej *Reject) {
	var buf [6]hpack.HeaderField
	fields := append(buf[:0],
		hpack.HeaderField{Name: ":status", Value: strconv.Itoa(rej.HTTPStatus)},
		hpack.HeaderField{Name: "content-type", Value: "text/plain; charset=utf-8"},
		hpack.HeaderField{Name: "x-content-type-options", Value: "nosniff"},
	)
	fields = AppendStatus(fields, rej.Status)
	it := h2conn.HeadersItem(fields, false)
	it.Hold = true // the body follows at once
	if err := st.Send(it); err != nil {
		return
	}
	b := bufpool.Default().Copy([]byte(rej.Status.Message() + "\n"))
	if err := st.Send(h2conn.DataItem(b, false)); err != nil { // takes ownership of b
		return
	}
	var once sync.Once
	end := func() { once.Do(func() { st.Send(h2conn.DataItem(nil, true)) }) }
	t := time.AfterFunc(rejectDrainTimeout, end)
	idle := time.AfterFunc(rejectDrainIdle, end)
	n := 0
	for n <= rejectDrainBytes {
		b, err := st.Recv()
		if err != nil {
			break // io.EOF: the client ended its request; else a reset
		}
		idle.Reset(rejectDrainIdle)
		n += b.Len()
		b.Free() // returned by Recv, owned here
	}
	t.Stop()
	idle.Stop()
	end() // waits out a timer that got there first
}

// SkipMsg receives the next message and drops it: nil when there was one,
// io.EOF at the end of the request, or the receive error.
func (s *ServerStream) SkipMsg() error {
	if err := s.enterRecv(); err != nil {
		return err
	}
	defer s.leave(true)
	msg, err := s.recvEntered()
	if err != nil {
		return err
	}
	msg.Free()
	return nil
}

// recvPayload returns the stream's next payload for the parser (nextPayload).
func (s *ServerStream) recvPayload() (*bufpool.Buffer, error) {
	if s.tr != nil {
		return s.tr.Recv()
	}
	return nextPayload(s.parser, s.st)
}
