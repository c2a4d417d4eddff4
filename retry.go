package leangrpc

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Retries under a service config retry policy (gRFC A6), as grpc-go makes
// them. A call runs attempts until one commits it: it commits when response
// headers (or a message) arrive, when the request messages it keeps for
// replay outgrow grpc.MaxRetryRPCBufferSize, or when the caller asks for
// the trailer or the context. Before that, an attempt that ends without
// response headers with a status the policy lists is retried after an
// exponential backoff with jitter, or after the server's
// grpc-retry-pushback-ms, while the attempts stay within the policy's
// maxAttempts and the ClientConn's retry throttling allows. A unary call
// re-encodes its request for each attempt; a stream keeps the messages it
// sent (grpc-go's contract forbids changing a message after SendMsg) and
// sends them again on the new attempt.

// retryState is the retry bookkeeping of one call.
type retryState struct {
	policy    *retryPolicy
	throttler *retryThrottler // nil without retry throttling
	// retries counts the policy's retries so far (grpc-previous-rpc-
	// attempts of the next attempt); sincePushback those since the last
	// pushback, the exponent of the backoff.
	retries       int
	sincePushback int
}

// next decides on an attempt that failed with err, a status error, before
// the call committed; trailer is the attempt's (nil if it had none). It
// returns nil after waiting the backoff when the call is to be retried,
// else the call's final error: err itself, err wrapped when the attempts
// ran out (grpc-go's words), or the context's error when it ended during
// the wait.
func (r *retryState) next(ctx context.Context, err error, trailer metadata.MD) error {
	pushback, hasPushback := 0, false
	switch v := trailer["grpc-retry-pushback-ms"]; len(v) {
	case 0:
	case 1:
		n, perr := strconv.Atoi(v[0])
		if perr != nil || n < 0 {
			// The server asks for no retry; that counts as a failure
			// for throttling.
			r.throttler.throttle()
			return err
		}
		pushback, hasPushback = n, true
	default:
		r.throttler.throttle()
		return err
	}
	if !r.policy.retryable(status.Code(err)) {
		return err
	}
	if r.throttler.throttle() {
		return err
	}
	if r.retries+1 >= r.policy.maxAttempts {
		return fmt.Errorf("max retries exhausted: failed after %d attempts: %w", r.retries+1, err)
	}
	var wait time.Duration
	if hasPushback {
		wait = time.Duration(pushback) * time.Millisecond
		r.sincePushback = 0
	} else {
		p := r.policy
		d := min(float64(p.initialBackoff)*math.Pow(p.multiplier, float64(r.sincePushback)), float64(p.maxBackoff))
		wait = time.Duration(d * (0.8 + 0.4*rand.Float64())) // ±20% jitter, as grpc-go
		r.sincePushback++
	}
	t := time.NewTimer(wait)
	select {
	case <-t.C:
		r.retries++
		return nil
	case <-ctx.Done():
		t.Stop()
		return status.FromContextError(ctx.Err()).Err()
	}
}

// attemptResult is what a unary call's retry decision needs to know of
// an attempt.
type attemptResult struct {
	size    int  // bytes of the request as sent (with its prefix); 0 if not sent
	local   bool // the request failed locally (encoding, size limit): never retried
	headers bool // response headers arrived: the call committed
	trailer metadata.MD
}

// sent records the outcome of sending the request.
func (r *attemptResult) sent(n grpcwire.MsgSize, err error) {
	if err == nil {
		r.size = n.Wire + grpcwire.PrefixLen
	}
	r.local = err != nil && err != io.EOF
}

// observe records how the attempt on cs, which has ended, ended.
func (r *attemptResult) observe(cs *grpcwire.ClientStream) {
	if r.local {
		return
	}
	r.headers = !cs.TrailersOnly()
	r.trailer = cs.Trailer()
}

// invokeRetry runs a unary call under the retry policy rp.
func (cc *ClientConn) invokeRetry(ctx context.Context, method string, args, reply any, ci *callInfo, rp *retryPolicy, thr *retryThrottler) error {
	ci.keepTrailer = true // for grpc-retry-pushback-ms
	r := retryState{policy: rp, throttler: thr}
	transparent, lastTransparent := 0, false
	for {
		var res attemptResult
		var err error
		if cc.stats != nil {
			err = cc.invokeOnceStats(ctx, method, args, reply, ci, lastTransparent, &res)
		} else {
			err = cc.closingErr(cc.invokeAttempt(ctx, method, args, reply, ci, &res))
		}
		if err == nil || res.local || res.headers || res.size > ci.retryBuffer {
			return err
		}
		// A stream the server never processed is retried at once, before
		// the policy counts anything, as grpc-go does on a first attempt.
		lastTransparent = r.retries == 0 && transparent < 2 && unprocessed(err)
		if lastTransparent {
			transparent++
			continue
		}
		if err := r.next(ctx, err, res.trailer); err != nil {
			return err
		}
		ci.previousAttempts = r.retries
	}
}

// invokeAttempt is one attempt of a unary call under a retry policy,
// recorded in res.
func (cc *ClientConn) invokeAttempt(ctx context.Context, method string, args, reply any, ci *callInfo, res *attemptResult) error {
	cs, p, err := cc.openStream(ctx, method, ci, true)
	if err != nil {
		return err
	}
	err = invokeStream(cs, nil, args, reply, res)
	res.observe(cs)
	p.ended(cs, err)
	ci.after(cs, p.peer)
	cs.Release()
	return err
}

// streamRetry is the retry state of a streaming call under a retry
// policy. Its mu also guards the clientStream's attempt fields (cs, peer,
// stats, ctx) until the call commits; they do not change afterwards.
type streamRetry struct {
	ctx    context.Context // the call's, with the method config's timeout
	method string
	limit  int // grpc.MaxRetryRPCBufferSize

	mu          sync.Mutex // guards the fields below
	state       retryState
	committed   bool
	buf         []bufferedOp // what the call sent, to replay; nil once committed
	bufSize     int          // bytes of the messages in buf, prefixes included
	transparent int          // transparent retries so far
	// final is the call's error when the retries ended it with an error
	// of their own (attempts exhausted, the context during a backoff, no
	// attempt could be opened); nil while the current attempt's status is
	// the call's. noAttempt says the call has no attempt to report
	// instead: the last could not be opened.
	final     error
	noAttempt bool
	// inline holds buf's first entries: a stream that sends one message
	// and half-closes buffers without an allocation of its own.
	inline [2]bufferedOp
}

// bufferedOp is a message sent (m, last) or the half-close (closeSend).
type bufferedOp struct {
	m         any
	last      bool
	closeSend bool
}

func (rs *streamRetry) commit() {
	rs.mu.Lock()
	rs.commitLocked()
	rs.mu.Unlock()
}

// commitLocked ends the retries: the current attempt is the call's.
func (rs *streamRetry) commitLocked() {
	rs.committed = true
	clear(rs.buf) // the messages go to the garbage collector
	rs.buf = nil
}

// startRetry opens the first attempt of a stream under the retry policy
// rp.
func (s *clientStream) startRetry(ctx context.Context, method string, rp *retryPolicy, thr *retryThrottler) error {
	rs := &streamRetry{ctx: ctx, method: method, limit: s.ci.retryBuffer, state: retryState{policy: rp, throttler: thr}}
	rs.buf = rs.inline[:0]
	s.rs = rs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return s.openRetryLocked(false)
}

// openRetryLocked opens an attempt, waiting and trying again while opening
// fails with a status the policy retries, and replays on it what the call
// sent. It returns the call's final error when no attempt opened.
func (s *clientStream) openRetryLocked(transparent bool) error {
	rs := s.rs
	for {
		err := s.openAttempt(rs.ctx, rs.method, transparent)
		if err == nil {
			s.replayLocked()
			return nil
		}
		if err := rs.state.next(rs.ctx, s.cc.closingErr(err), nil); err != nil {
			return err
		}
		s.ci.previousAttempts = rs.state.retries
		transparent = false
	}
}

// replayLocked sends the buffered messages and half-close on the current
// attempt. It stops when the attempt fails: the next settle sees that.
func (s *clientStream) replayLocked() {
	for _, op := range s.rs.buf {
		if op.closeSend {
			s.cs.CloseSend()
			continue
		}
		if _, err := sendAttempt(s.cs, s.stats, op.m, op.last); err != nil {
			return
		}
	}
}

// sendAttempt sends m on an attempt's stream, reported to cst if not nil.
func sendAttempt(cs *grpcwire.ClientStream, cst *clientCallStats, m any, last bool) (grpcwire.MsgSize, error) {
	if cst != nil {
		return cst.sendMsg(cs, m, last)
	}
	return cs.SendMsgSized(m, last)
}

// dropAttemptLocked ends the current attempt, failed with err, before a
// retry replaces it.
func (s *clientStream) dropAttemptLocked(err error) {
	if s.stats != nil {
		s.stats.end(err, s.cs.Trailer())
	}
	s.cs.Abort() // stops its context watch
}

// settle waits until the call commits, retrying the attempts that fail
// before: it returns once response headers arrived (or an attempt ended
// in a way that is not retried), and from then on the current attempt
// tells how the call goes. It returns the call's final error instead when
// the retries ended it (see streamRetry.final). Any goroutine may call it:
// it waits on the attempt only for its headers.
func (s *clientStream) settle() error {
	rs := s.rs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for !rs.committed {
		cs := s.cs
		rs.mu.Unlock()
		trailersOnly := cs.TrailersOnly()
		rs.mu.Lock()
		if cs == s.cs && !rs.committed {
			s.attemptEndedLocked(trailersOnly)
		}
	}
	err := rs.final
	if !rs.noAttempt {
		// As in grpc-go, the call that saw the retries end reports their
		// error; later ones report the last attempt's status.
		rs.final = nil
	}
	return err
}

// attemptEndedLocked acts on the current attempt once its response
// headers arrived or it ended without them (trailersOnly): it commits the
// call, or retries it on a new attempt.
func (s *clientStream) attemptEndedLocked(trailersOnly bool) {
	rs, cs := s.rs, s.cs
	_, err := cs.Header()
	if !trailersOnly || err == nil { // headers, or an OK Trailers-Only response
		rs.commitLocked()
		return
	}
	err = s.cc.closingErr(err)
	transparent := rs.state.retries == 0 && rs.transparent < 2 && unprocessed(err)
	if transparent {
		rs.transparent++
	} else if ferr := rs.state.next(rs.ctx, err, cs.Trailer()); ferr != nil {
		if ferr != err {
			rs.final = ferr
		}
		rs.commitLocked()
		return
	}
	s.dropAttemptLocked(err)
	s.ci.previousAttempts = rs.state.retries
	if ferr := s.openRetryLocked(transparent); ferr != nil {
		rs.final, rs.noAttempt = ferr, true
		rs.commitLocked()
	}
}

// sendRetry is SendMsg under a retry policy. Before the call commits, a
// message is kept for replay once sent; when the attempt has ended (the
// send finds the stream closed), the send decides on the attempt as a
// receive would, and a retry's new attempt gets the message after the
// replayed ones.
func (s *clientStream) sendRetry(m any, last bool) error {
	rs := s.rs
	for {
		rs.mu.Lock()
		cs, cst, committed := s.cs, s.stats, rs.committed
		rs.mu.Unlock()
		n, err := sendAttempt(cs, cst, m, last)
		if err != nil && err != io.EOF {
			// A local failure (encoding) ends the call, as in grpc-go.
			s.finish(err)
			return err
		}
		if committed {
			return err
		}
		if err == io.EOF {
			// The attempt ended, so its headers or end are known.
			trailersOnly := cs.TrailersOnly()
			rs.mu.Lock()
			if cs == s.cs && !rs.committed {
				s.attemptEndedLocked(trailersOnly)
			}
			retried := cs != s.cs
			rs.mu.Unlock()
			if !retried {
				return io.EOF // RecvMsg reports the call's end
			}
			continue
		}
		rs.mu.Lock()
		if cs != s.cs {
			rs.mu.Unlock()
			continue // a retry replaced the attempt and did not replay m
		}
		if !rs.committed {
			rs.buf = append(rs.buf, bufferedOp{m: m, last: last})
			rs.bufSize += n.Wire + grpcwire.PrefixLen
			if rs.bufSize > rs.limit {
				rs.commitLocked()
			}
		}
		rs.mu.Unlock()
		return nil
	}
}

// closeSendRetry is CloseSend under a retry policy: the half-close is
// replayed on a new attempt like the messages.
func (s *clientStream) closeSendRetry() error {
	rs := s.rs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.committed {
		rs.buf = append(rs.buf, bufferedOp{closeSend: true})
	}
	return s.cs.CloseSend()
}
