package leangrpc

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
)

// How a ClientConn connects: grpc-go's dial options about dialing,
// reconnect backoff and the blocking Dial that NewClient does not have.

// WithConnectParams sets the reconnect backoff (gRPC's connection-backoff
// document: base delay, multiplier, jitter, maximum delay) and the time a
// connection attempt may take. A zero MinConnectTimeout keeps the default
// of 20 seconds.
func WithConnectParams(p grpc.ConnectParams) DialOption {
	return dialOptionFunc(func(o *dialOptions) {
		o.backoff.base = p.Backoff.BaseDelay
		o.backoff.multiplier = p.Backoff.Multiplier
		o.backoff.jitter = p.Backoff.Jitter
		o.backoff.max = p.Backoff.MaxDelay
		if p.MinConnectTimeout > 0 {
			o.backoff.minConnectTimeout = p.MinConnectTimeout
		}
	})
}

// WithBackoffConfig sets the largest reconnect delay; the rest of the
// backoff keeps gRPC's defaults, as in grpc-go.
//
// Deprecated: use WithConnectParams, as with grpc-go.
func WithBackoffConfig(b grpc.BackoffConfig) DialOption {
	return dialOptionFunc(func(o *dialOptions) {
		base := defaultBackoff
		base.minConnectTimeout = o.backoff.minConnectTimeout
		base.max = b.MaxDelay
		o.backoff = base
	})
}

// WithBackoffMaxDelay is WithBackoffConfig with only the largest delay.
//
// Deprecated: use WithConnectParams, as with grpc-go.
func WithBackoffMaxDelay(d time.Duration) DialOption {
	return WithBackoffConfig(grpc.BackoffConfig{MaxDelay: d})
}

// WithDialer sets the function that opens the network connection, given
// the time left for the attempt (0: no limit), as WithContextDialer does.
//
// Deprecated: use WithContextDialer, as with grpc-go.
func WithDialer(f func(string, time.Duration) (net.Conn, error)) DialOption {
	return WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		if deadline, ok := ctx.Deadline(); ok {
			return f(addr, time.Until(deadline))
		}
		return f(addr, 0)
	})
}

// WithInsecure makes the connection plaintext, as
// WithTransportCredentials(insecure.NewCredentials()) does.
//
// Deprecated: use WithTransportCredentials and insecure.NewCredentials(),
// as with grpc-go.
func WithInsecure() DialOption { return WithTransportCredentials(insecure.NewCredentials()) }

// WithBlock makes Dial and DialContext return only once the ClientConn is
// READY, or fail when their context ends first (see DialContext). It does
// nothing to NewClient, which never blocks, as with grpc-go.
//
// Deprecated: grpc-go deprecates it (not supported by NewClient); wait for
// READY with Connect, GetState and WaitForStateChange instead.
func WithBlock() DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.blocking().block = true })
}

// WithReturnConnectionError is WithBlock, and a blocking Dial whose context
// ends returns the last connection error with the context's, as grpc-go's
// does.
//
// Deprecated: grpc-go deprecates it (not supported by NewClient).
func WithReturnConnectionError() DialOption {
	return dialOptionFunc(func(o *dialOptions) {
		b := o.blocking()
		b.block, b.returnLastError = true, true
	})
}

// FailOnNonTempDialError makes a blocking Dial fail at once, with the
// connection error, when a connection attempt fails with an error that is
// not temporary (a refused connection, say), rather than wait for its
// context. It does nothing to NewClient, as with grpc-go.
//
// Deprecated: grpc-go deprecates it (not supported by NewClient).
func FailOnNonTempDialError(f bool) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.blocking().failOnNonTemp = f })
}

// WithTimeout bounds a blocking Dial (WithBlock) as its context would. It
// does nothing to NewClient, as with grpc-go; a connection attempt is
// bounded by WithConnectParams' MinConnectTimeout.
//
// Deprecated: grpc-go deprecates it (not supported by NewClient); use
// DialContext with a context that has a deadline.
func WithTimeout(d time.Duration) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.blocking().timeout = d })
}

// WithResolvers adds resolver builders for this ClientConn only. A target
// whose scheme one of them serves uses it rather than the one registered
// with grpc-go's resolver.Register, as with grpc-go; with several for one
// scheme the first counts.
func WithResolvers(rs ...resolver.Builder) DialOption {
	return dialOptionFunc(func(o *dialOptions) {
		o.resolvers = append(o.resolvers, rs...)
	})
}

// defaultIdleTimeout is grpc-go's: a ClientConn without calls for half an
// hour lets its connection and resolver go.
const defaultIdleTimeout = 30 * time.Minute

// WithIdleTimeout sets how long a ClientConn may go without calls before it
// enters IDLE: it closes its connections and its resolver, and the next
// call or Connect builds them again, as with grpc-go. The default is 30
// minutes; 0 (or less) keeps the ClientConn out of IDLE once it has left
// it.
func WithIdleTimeout(d time.Duration) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.idleTimeout = d })
}

// WithDisableHealthCheck turns client-side health checking off: a
// service config's healthCheckConfig is ignored, and balancers see a
// SubConn as healthy as soon as it is READY, as with grpc-go's option.
func WithDisableHealthCheck() DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.disableHealthCheck = true })
}
