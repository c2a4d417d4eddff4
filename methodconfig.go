package leangrpc

import (
	"context"

	"google.golang.org/grpc"
)

// A call looks up its method config once, at its start, in the service
// config in force (ClientConn.sc); with none, the call path is the plain
// one. parseCallOptions applies waitForReady and the message size limits;
// the functions here apply the timeout and choose between a call under a
// retry policy (retry.go) and one with transparent retries only.

// timeoutContext returns ctx bounded by the method config's timeout (the
// earlier of the two deadlines wins) and its cancel, nil when mc sets no
// timeout. A negative timeout is ignored, as in grpc-go.
func (mc *methodConfig) timeoutContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if mc == nil || mc.timeout == nil || *mc.timeout < 0 {
		return ctx, nil
	}
	return context.WithTimeout(ctx, *mc.timeout)
}

// retryPolicy returns the retry policy a call follows, nil when it has
// none or retries are disabled.
func (cc *ClientConn) retryPolicy(mc *methodConfig) *retryPolicy {
	if mc == nil || cc.opts.disableRetry {
		return nil
	}
	return mc.retry
}

// invokeConfigured runs a unary call under the service config sc, mc
// being the method's config (nil for none).
func (cc *ClientConn) invokeConfigured(ctx context.Context, method string, args, reply any, ci *callInfo, sc *serviceConfig, mc *methodConfig) error {
	ctx, cancel := mc.timeoutContext(ctx)
	if cancel != nil {
		defer cancel()
	}
	var err error
	if rp := cc.retryPolicy(mc); rp != nil {
		err = cc.invokeRetry(ctx, method, args, reply, ci, rp, sc.throttler)
	} else {
		err = cc.invokeAttempts(ctx, method, args, reply, ci)
	}
	if err == nil && !cc.opts.disableRetry {
		// Every successful call refills the throttler, with a retry
		// policy or not, as in grpc-go.
		sc.throttler.success()
	}
	return err
}

// newStreamConfigured begins a streaming call under the service config
// sc, mc being the method's config (nil for none).
func (cc *ClientConn) newStreamConfigured(ctx context.Context, desc *grpc.StreamDesc, method string, ci *callInfo, sc *serviceConfig, mc *methodConfig) (grpc.ClientStream, error) {
	ctx, cancel := mc.timeoutContext(ctx)
	s := &clientStream{cc: cc, ctx: ctx, desc: desc, ci: *ci, cancel: cancel}
	if !cc.opts.disableRetry {
		s.throttler = sc.throttler
	}
	var err error
	if rp := cc.retryPolicy(mc); rp != nil {
		err = s.startRetry(ctx, method, rp, sc.throttler)
	} else {
		err = s.openAttempt(ctx, method, false)
	}
	if err != nil {
		if cancel != nil {
			cancel()
		}
		for _, f := range ci.onFinish {
			f(err)
		}
		return nil, err
	}
	return s, nil
}
