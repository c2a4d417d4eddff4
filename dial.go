package leangrpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/connectivity"
)

// Dial is DialContext with context.Background().
//
// Deprecated: use NewClient, as grpc-go advises; Dial stays for the
// programs that still call grpc.Dial.
func Dial(target string, opts ...DialOption) (*ClientConn, error) {
	return DialContext(context.Background(), target, opts...)
}

// DialContext is grpc-go's DialContext: NewClient, except that a target
// without a known scheme is read with "passthrough" (the address goes to
// the dialer as written, as with grpc-go's Dial) rather than "dns", and
// that the ClientConn leaves IDLE at once and starts connecting rather
// than at its first call.
//
// With WithBlock it returns only once the ClientConn is READY. When ctx
// (bounded further by WithTimeout) ends first, it closes the ClientConn
// and returns ctx's error, or, with WithReturnConnectionError, the last
// connection error; with FailOnNonTempDialError(true) a connection attempt
// that fails with an error that is not temporary ends it at once with
// that error.
//
// Deprecated: use NewClient, as grpc-go advises.
func DialContext(ctx context.Context, target string, opts ...DialOption) (conn *ClientConn, err error) {
	cc, err := newClient(target, "passthrough", opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cc.Close()
		}
	}()
	cc.Connect()
	d := cc.opts.dial
	if d == nil || !d.block {
		return cc, nil
	}
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	for {
		s := cc.GetState()
		if s == connectivity.Ready {
			return cc, nil
		}
		if s == connectivity.Idle {
			cc.Connect()
		}
		if s == connectivity.TransientFailure && d.failOnNonTemp {
			if err := d.lastErr(); err != nil && !isTemporary(err) {
				return nil, err
			}
		}
		if !cc.WaitForStateChange(ctx, s) {
			if err := d.lastErr(); err != nil && d.returnLastError {
				return nil, fmt.Errorf("%v: %v", ctx.Err(), err)
			}
			return nil, ctx.Err()
		}
	}
}

// dialWait is what a blocking Dial waits with (the options WithBlock,
// WithTimeout, FailOnNonTempDialError and WithReturnConnectionError set)
// and the last connection error its ClientConn met.
type dialWait struct {
	block           bool
	returnLastError bool
	failOnNonTemp   bool
	timeout         time.Duration

	mu   sync.Mutex
	last error // the last failed connection attempt's error
}

// blocking returns o's dialWait, making it at first use.
func (o *dialOptions) blocking() *dialWait {
	if o.dial == nil {
		o.dial = &dialWait{}
	}
	return o.dial
}

// noteConnError records err, a failed connection attempt's, for a
// blocking Dial; it does nothing for a ClientConn that NewClient made.
func (cc *ClientConn) noteConnError(err error) {
	if d := cc.opts.dial; d != nil {
		d.mu.Lock()
		d.last = err
		d.mu.Unlock()
	}
}

func (d *dialWait) lastErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// isTemporary reports whether a connection attempt that failed with err may
// succeed when tried again, as grpc-go's transport decides it: by the
// Temporary or Timeout method of the error the dial or the handshake
// returned (a refused connection's is false), temporary when it has
// neither.
func isTemporary(err error) bool {
	var ce connError
	if errors.As(err, &ce) {
		err = ce.err
	}
	if inner := errors.Unwrap(err); inner != nil {
		err = inner // what connectAddr wrapped with grpc-go's wording
	}
	switch e := err.(type) {
	case interface{ Temporary() bool }:
		return e.Temporary()
	case interface{ Timeout() bool }:
		return e.Timeout()
	}
	return true
}
