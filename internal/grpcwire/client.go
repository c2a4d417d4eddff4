package grpcwire

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
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

// ClientConfig is what the client glue needs for one call.
type ClientConfig struct {
	Pool    *bufpool.Pool    // nil: bufpool.Default()
	Codec   encoding.CodecV2 // nil: proto
	MaxRecv int              // 0: DefaultMaxRecvMsgSize
	MaxSend int              // 0: unlimited
	// AliasBytes lets the large bytes fields of received messages alias
	// the buffers they arrived in (DecodeMessage).
	AliasBytes bool
	// NoMetadata says the caller will not ask for the response headers or
	// trailers (Header and Trailer then return nil), sparing their maps.
	NoMetadata bool
	// TrailersOnlyMetadata keeps, despite NoMetadata, the metadata of a
	// Trailers-Only response: a retry policy reads its
	// grpc-retry-pushback-ms, and only such a response can be retried.
	TrailersOnlyMetadata bool
	// Unary says the caller waits in the stream's calls from its start to
	// its end (Invoke: SendMsg, then RecvMsg until the status, then
	// Release): the context is then watched by those waits
	// (h2conn.StreamOptions.WatchCanceled) instead of a context.AfterFunc, which
	// costs allocations and a registration on the parent.
	Unary bool
	// Compressor compresses the request messages; nil sends them as
	// they are. The request's Encoding must name it.
	Compressor encoding.Compressor
	// Observer, when not nil, is told of the response's header blocks as
	// the stream takes them in (stats handlers); NoMetadata must be false.
	Observer ResponseObserver
}

// ResponseObserver is told of a call's response headers and trailers. Its
// methods run on the goroutine that receives them (a Header, RecvMsg or
// Recv call) and must not call back into the stream.
type ResponseObserver interface {
	// ResponseHeader reports the response headers' metadata and message
	// encoding, and the payload length of the HEADERS frame that carried
	// them; not called for a Trailers-Only response.
	ResponseHeader(md metadata.MD, encoding string, wireLength int)
	// ResponseTrailer reports the trailers' metadata, or a Trailers-Only
	// response's, with its HEADERS frame's payload length.
	ResponseTrailer(md metadata.MD, wireLength int)
}

// ClientStream is the gRPC client side of one HTTP/2 stream. SendMsg and
// CloseSend are used by one goroutine, RecvMsg by one (possibly another);
// Header and Trailer may be called from any.
type ClientStream struct {
	st      *h2conn.Stream
	ctx     context.Context
	stop    func() bool     // stops the context watcher; nil while there is none
	done    <-chan struct{} // ctx.Done() when stop watches it (canceled)
	fired   bool            // the context watcher ran (or runs): the stream may not be reused
	pooled  bool            // ClientConfig.Unary: Release puts s in unaryStreams
	codec   encoding.CodecV2
	comp    encoding.Compressor // ClientConfig.Compressor
	pool    *bufpool.Pool
	maxSend int
	noMD    bool // ClientConfig.NoMetadata
	onlyMD  bool // ClientConfig.TrailersOnlyMetadata
	alias   bool // ClientConfig.AliasBytes
	obs     ResponseObserver

	// hdrMu serializes the wait for the response headers; hdrDone is set
	// once header, the parser's encoding and (for Trailers-Only) the final
	// status are.
	hdrMu    sync.Mutex
	hdrDone  atomic.Bool
	fieldBuf [12]hpack.HeaderField // request fields, used until NewStream returns
	header   metadata.MD
	hdrErr   error // the call's final error when it ended before headers

	// Receive side, owned by the goroutine calling RecvMsg.
	parser  Parser
	recvEOF bool
	ended   bool  // final status known
	final   error // io.EOF for OK, else a status error

	trMu    sync.Mutex // guards trailer and failed
	trailer metadata.MD
	failed  error // set by Fail: what ends the call instead of the reset's own error
}

// NewClientStream opens a stream on c with the request headers of req,
// adding grpc-timeout from ctx's deadline. The stream is reset with CANCEL
// when ctx ends. Errors are status errors; Unavailable ones that wrap
// h2conn.ErrGoingAway mean nothing was sent.
func NewClientStream(ctx context.Context, c *h2conn.Conn, req *Request, cfg ClientConfig) (*ClientStream, error) {
	return newClientStream(ctx, c, req, cfg, false)
}

// NewClientStreamHold is NewClientStream for a call whose first message
// (SendMsg) follows at once: the request headers wait for it and both
// leave in one syscall.
func NewClientStreamHold(ctx context.Context, c *h2conn.Conn, req *Request, cfg ClientConfig) (*ClientStream, error) {
	return newClientStream(ctx, c, req, cfg, true)
}

func newClientStream(ctx context.Context, c *h2conn.Conn, req *Request, cfg ClientConfig, hold bool) (*ClientStream, error) {
	if dl, ok := ctx.Deadline(); ok {
		req.HasTimeout = true
		req.Timeout = time.Until(dl)
		if req.Timeout <= 0 {
			return nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
	}
	var s *ClientStream
	if cfg.Unary {
		s, _ = unaryStreams.Get().(*ClientStream)
	}
	if s == nil {
		s = new(ClientStream)
	}
	s.ctx, s.codec, s.pool, s.maxSend, s.noMD, s.pooled = ctx, cfg.Codec, cfg.Pool, cfg.MaxSend, cfg.NoMetadata, cfg.Unary
	s.comp = cfg.Compressor
	s.onlyMD, s.alias = cfg.TrailersOnlyMetadata, cfg.AliasBytes
	s.obs = cfg.Observer
	fields := AppendRequestHeaders(s.fieldBuf[:0], req)
	done := ctx.Done()
	watched := hold && cfg.Unary && done != nil // the stream's waits watch ctx
	st, err := c.NewStream(ctx, fields, h2conn.StreamOptions{Unary: hold, Canceled: done, WatchCanceled: watched})
	if !hold {
		// With hold the engine may read the fields after NewStream
		// returned (it may return before they are encoded): recycle
		// clears them.
		clear(s.fieldBuf[:])
	}

	if err != nil {
		s.recycle()
		return nil, StreamStatusError(ctx, err)
	}
	s.st = st
	if s.codec == nil {
		s.codec = protoCodec
	}
	if s.pool == nil {
		s.pool = bufpool.Default()
	}
	s.parser.MaxRecv = cfg.MaxRecv
	s.parser.Pool = s.pool
	if done != nil && !watched {
		s.done = done
		// A receive that would read the socket itself (h2conn's offered
		// read role) looks at done first (StreamOptions.Canceled), so
		// that an earlier cancel wins over an answer read before this
		// reset runs.
		s.stop = context.AfterFunc(ctx, func() { st.Reset(h2frame.ErrCodeCancel) })
	}
	return s, nil
}

// Stream returns the underlying HTTP/2 stream.
func (s *ClientStream) Stream() *h2conn.Stream { return s.st }

// SendMsg sends one message; with last set the request ends with it
// (END_STREAM on its last DATA frame). After the stream ended, whatever
// ended it (the server's status, a reset, the context's deadline or
// cancellation, the connection), it returns io.EOF and RecvMsg reports the
// status, as grpc-go's transport errors do: a send racing the deadline must
// not turn into a DeadlineExceeded of its own.
func (s *ClientStream) SendMsg(m any, last bool) error {
	_, err := s.SendMsgSized(m, last)
	return err
}

// SendMsgSized is SendMsg that also returns the size of the message sent.
func (s *ClientStream) SendMsgSized(m any, last bool) (MsgSize, error) {
	if s.canceled() {
		return MsgSize{}, io.EOF
	}
	var b *bufpool.Buffer
	var pc *pieces
	var n MsgSize
	var err error
	if s.comp == nil {
		if b, pc, err = encodeForWire(s.pool, s.codec, m, s.maxSend); err == nil {
			if pc != nil {
				n.Len = pc.size
			} else {
				n.Len = b.Len() - PrefixLen
			}
			n.Wire = n.Len
		}
	} else {
		b, n, err = EncodeCompressed(s.pool, s.codec, s.comp, m, s.maxSend)
	}
	if err != nil {
		// grpc-go ends the call with the encoding error.
		s.st.Reset(h2frame.ErrCodeCancel)
		return MsgSize{}, err
	}
	if pc != nil {
		err = pc.send(s.st, last)
	} else {
		err = s.st.Send(h2conn.DataItem(b, last)) // takes ownership of b
	}
	if err != nil {
		if err == h2conn.ErrConcurrentWrite {
			return MsgSize{}, errConcurrentSend // misuse, not the end of the call
		}
		return MsgSize{}, io.EOF
	}
	return n, nil
}

// CloseSend half-closes the request.
func (s *ClientStream) CloseSend() error {
	if !s.canceled() {
		s.st.Send(h2conn.DataItem(nil, true))
	}
	return nil
}

// canceled reports whether the call's context has ended, and then resets
// the stream with CANCEL itself: a send, a half-close or a receive that
// starts after the context ended fails as the context says, whether or not
// the AfterFunc's reset has run yet. Otherwise a half-close right after a
// cancel could still go out, the server answer it, and the receive after
// return that answer (grpc-go's interop case cancel_after_begin wants
// Canceled). Only streams whose waits do not watch the context (all but
// unary calls) keep done.
func (s *ClientStream) canceled() bool {
	if s.done == nil || s.st == nil {
		return false
	}
	select {
	case <-s.done:
		s.st.Reset(h2frame.ErrCodeCancel)
		return true
	default:
		return false
	}
}

// Header waits for the response headers and returns their metadata. It
// returns nil, nil after a Trailers-Only response, and the call's status
// error when the stream failed before headers arrived.
func (s *ClientStream) Header() (metadata.MD, error) {
	s.waitHeaders()
	if s.hdrErr != nil && s.hdrErr != io.EOF {
		return nil, s.hdrErr
	}
	return s.header, nil
}

// TrailersOnly waits for the response headers and reports whether the
// call ended without them: a Trailers-Only response, or a failure (a
// reset, the connection, the context) before headers. A retry policy may
// retry only such a call. It may be called from any goroutine.
func (s *ClientStream) TrailersOnly() bool {
	s.waitHeaders()
	return s.hdrErr != nil
}

// Trailer returns the trailers; complete once RecvMsg returned an error.
func (s *ClientStream) Trailer() metadata.MD {
	s.trMu.Lock()
	defer s.trMu.Unlock()
	return s.trailer
}

func (s *ClientStream) waitHeaders() {
	if s.hdrDone.Load() {
		return
	}
	s.hdrMu.Lock()
	defer s.hdrMu.Unlock()
	if s.hdrDone.Load() {
		return
	}
	defer s.hdrDone.Store(true)
	for {
		fields, end, err := s.st.RecvHeaders()
		if err != nil {
			s.hdrErr = s.streamErr(err)
			return
		}
		r := parseResponse(fields, true, end, s.noMD && !(end && s.onlyMD))
		if r.Informational {
			continue
		}
		if r.Reset {
			s.st.Reset(h2frame.ErrCodeProtocol)
		}
		if r.Status != nil {
			s.setTrailer(r.MD)
			if s.obs != nil && !r.Reset {
				s.obs.ResponseTrailer(r.MD, s.st.TrailersWireLength())
			}
			s.hdrErr = statusResult(r.Status)
			return
		}
		s.header = r.MD
		if r.Encoding != "" {
			// The receiving goroutine reads the parser's encoding
			// only after hdrDone, which is stored after this.
			s.parser.SetEncoding(r.Encoding)
		}
		if s.obs != nil {
			s.obs.ResponseHeader(r.MD, r.Encoding, s.st.HeadersWireLength())
		}
		return
	}
}

func (s *ClientStream) setTrailer(md metadata.MD) {
	s.trMu.Lock()
	s.trailer = md
	s.trMu.Unlock()
}

// statusResult is what RecvMsg returns for a final status.
func statusResult(st *status.Status) error {
	if st.Code() == codes.OK {
		return io.EOF
	}
	return st.Err()
}

// RecvMsg receives the next message into m. At the end of the call it
// returns io.EOF for an OK status, else the status error.
func (s *ClientStream) RecvMsg(m any) error {
	_, err := s.recvMsg(m, false)
	return err
}

// RecvMsgSized is RecvMsg that also returns the size of the message
// received.
func (s *ClientStream) RecvMsgSized(m any) (MsgSize, error) { return s.recvMsg(m, true) }

// recvMsg receives into m; the size is measured only when sized (an
// interface call on the message's buffer that RecvMsg does not pay).
func (s *ClientStream) recvMsg(m any, sized bool) (n MsgSize, err error) {
	msg, err := s.Recv()
	if err != nil {
		return MsgSize{}, err
	}
	if sized {
		n = msg.size()
	}
	if err := DecodeMessage(s.codec, msg, m, s.alias); err != nil {
		s.fail(err)
		return MsgSize{}, err
	}
	return n, nil
}

// Recv returns the next raw message (the caller owns msg.Data), or the
// call's end as RecvMsg reports it.
func (s *ClientStream) Recv() (Message, error) {
	if s.ended {
		return Message{}, s.final
	}
	if s.canceled() {
		return Message{}, s.end(status.FromContextError(s.ctx.Err()).Err())
	}
	s.waitHeaders()
	if s.hdrErr != nil {
		return Message{}, s.end(s.hdrErr)
	}
	for {
		msg, ok, err := s.parser.Next()
		if err != nil {
			s.st.Reset(h2frame.ErrCodeCancel)
			return Message{}, s.end(err)
		}
		if ok {
			return msg, nil
		}
		if s.recvEOF {
			if s.parser.InProgress() {
				return Message{}, s.end(ErrTruncated)
			}
			tr := s.st.Trailers()
			if tr == nil {
				return Message{}, s.end(status.Error(codes.Internal, "server closed the stream without sending trailers"))
			}
			r := parseResponse(tr, false, true, s.noMD)
			s.setTrailer(r.MD)
			if s.obs != nil {
				s.obs.ResponseTrailer(r.MD, s.st.TrailersWireLength())
			}
			return Message{}, s.end(statusResult(r.Status))
		}
		if n := s.parser.TakeExpect(); n > 0 {
			s.st.ExpectMessage(n)
		}
		b, err := s.recvPayload()
		if err == io.EOF {
			s.recvEOF = true
			continue
		}
		if err != nil {
			return Message{}, s.end(s.streamErr(err))
		}
		s.parser.Push(b) // takes ownership of b
	}
}

// Fail ends the call with err, a status error, after misuse on the
// sending side (grpc-go's SendMsg after CloseSend): the stream is reset
// with CANCEL, and RecvMsg, on whatever goroutine, reports err once it has
// returned the messages that arrived before. It may be called from any
// goroutine.
func (s *ClientStream) Fail(err error) {
	s.trMu.Lock()
	if s.failed == nil {
		s.failed = err
	}
	s.trMu.Unlock()
	s.st.Reset(h2frame.ErrCodeCancel)
}

// streamErr is the status error of a failed stream operation: the error
// Fail recorded, else the transport error's status.
func (s *ClientStream) streamErr(err error) error {
	s.trMu.Lock()
	failed := s.failed
	s.trMu.Unlock()
	if failed != nil {
		return failed
	}
	return StreamStatusError(s.ctx, err)
}

// fail ends the call with err after a local failure (decoding): the stream
// is reset with CANCEL.
func (s *ClientStream) fail(err error) {
	s.st.Reset(h2frame.ErrCodeCancel)
	s.end(err)
}

// end records the final result and releases the stream.
func (s *ClientStream) end(err error) error {
	if s.ended {
		return s.final
	}
	s.ended = true
	s.final = err
	if s.stop != nil && !s.stop() {
		s.fired = true
	}
	s.parser.Close()
	// The stream is not Released: a SendMsg on another goroutine may still
	// be using it, and Release is optional.
	return err
}

// Release ends the call if it has not ended (as Abort) and gives the
// HTTP/2 stream back to the connection for reuse, and s itself to a pool
// when the call was made with ClientConfig.Unary. Only for a caller that
// owns both directions and is done with s, such as Invoke once the result
// and the call options are taken: s must not be used afterwards. A stream
// whose context watcher fired is not reused (the watcher may still be
// resetting it).
func (s *ClientStream) Release() {
	s.Abort()
	if !s.fired {
		s.st.Release()
	}
	s.st = nil
	s.recycle()
}

// recycle puts s, cleared, in unaryStreams when it came from there.
func (s *ClientStream) recycle() {
	if s.pooled {
		*s = ClientStream{}
		unaryStreams.Put(s)
	}
}

// unaryStreams holds the ClientStream objects of unary calls (Invoke gets
// one from NewClientStream and gives it back with Release).
var unaryStreams sync.Pool

// Abort ends the call from the caller's side (a client that stops
// receiving, such as Invoke after an error): the stream is reset with
// CANCEL if still open and released. It must not race with Recv.
func (s *ClientStream) Abort() {
	if s.ended {
		return
	}
	select {
	case <-s.st.Done():
	default:
		s.st.Reset(h2frame.ErrCodeCancel)
	}
	s.end(status.Error(codes.Canceled, "call aborted"))
}

// Ended reports whether the call's final status is known to RecvMsg.
func (s *ClientStream) Ended() bool { return s.ended }

// recvPayload returns the stream's next payload for the parser (nextPayload).
func (s *ClientStream) recvPayload() (*bufpool.Buffer, error) {
	return nextPayload(&s.parser, s.st)
}
