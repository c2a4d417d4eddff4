package leangrpc

import (
	"context"
	"sync"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/status"
)

// Name resolution runs through grpc-go's public resolver plug-in API: the
// target's resolver.Builder builds a resolver.Resolver that reports to a
// resolverConn. What it reports goes to the balancer (balancer.go) with
// the service config in force. The ClientConn builds the resolver when it
// leaves idle mode and closes it when it enters it again, so each
// resolverConn belongs to one stretch out of idle; reports from an older
// one are ignored.

// resolverConn is the resolver.ClientConn a resolver reports to.
type resolverConn struct {
	cc *ClientConn

	// callMu serializes the calls into the resolver, ResolveNow and Close,
	// as grpc-go does: no resolver sees ResolveNow during or after its
	// Close. It is never held while taking the ClientConn's mu, and the
	// resolver may report while it is held.
	callMu sync.Mutex

	mu     sync.Mutex // guards the fields below
	closed bool
	r      resolver.Resolver // nil until Build returns
}

func newResolverConn(cc *ClientConn) *resolverConn {
	return &resolverConn{cc: cc}
}

// UpdateState hands the resolver's state to the balancer, with the
// service config in force, and returns the balancer's verdict
// (balancer.ErrBadResolverState tells resolvers such as dns to try again
// later).
func (rc *resolverConn) UpdateState(s resolver.State) error {
	if rc.isClosed() {
		return nil
	}
	return rc.cc.updateResolverState(rc, s)
}

// ReportError hands a resolver's failure to the balancer.
func (rc *resolverConn) ReportError(err error) {
	if rc.isClosed() {
		return
	}
	rc.cc.resolverError(rc, err)
}

// NewAddress is the deprecated form of UpdateState.
func (rc *resolverConn) NewAddress(addrs []resolver.Address) {
	rc.UpdateState(resolver.State{Addresses: addrs})
}

// ParseServiceConfig parses a service config a resolver found (the dns
// resolver's TXT records, for one).
func (rc *resolverConn) ParseServiceConfig(js string) *serviceconfig.ParseResult {
	sc, err := parseServiceConfig(js, int(rc.cc.opts.maxCallAttempts))
	if err != nil {
		return &serviceconfig.ParseResult{Err: err}
	}
	return &serviceconfig.ParseResult{Config: sc}
}

func (rc *resolverConn) isClosed() bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.closed
}

// resolveNow asks the resolver to resolve again. It takes no lock of the
// ClientConn's: a resolver may report from inside ResolveNow.
func (rc *resolverConn) resolveNow() {
	rc.callMu.Lock()
	defer rc.callMu.Unlock()
	rc.mu.Lock()
	r := rc.r
	closed := rc.closed
	rc.mu.Unlock()
	if r != nil && !closed {
		r.ResolveNow(resolver.ResolveNowOptions{})
	}
}

// close stops the resolver; later reports are ignored.
func (rc *resolverConn) close() {
	rc.callMu.Lock()
	defer rc.callMu.Unlock()
	rc.mu.Lock()
	if rc.closed {
		rc.mu.Unlock()
		return
	}
	rc.closed = true
	r := rc.r
	rc.mu.Unlock()
	if r != nil {
		r.Close()
	}
}

// startResolver builds the target's resolver. Build runs without the
// ClientConn's locks: resolvers may report from inside it.
func (cc *ClientConn) startResolver(rc *resolverConn) error {
	rc.callMu.Lock()
	defer rc.callMu.Unlock()
	r, err := cc.builder.Build(cc.parsedTarget(), rc, resolver.BuildOptions{
		DisableServiceConfig: cc.opts.disableServiceConfig,
		DialCreds:            cc.opts.creds,
		CredsBundle:          cc.opts.bundle,
		Dialer:               cc.opts.dialer,
		Authority:            cc.authority,
		MetricsRecorder:      noMetrics{},
	})
	if err != nil {
		return err
	}
	rc.mu.Lock()
	closed := rc.closed
	if !closed {
		rc.r = r
	}
	rc.mu.Unlock()
	if closed {
		r.Close()
	}
	return nil
}

// resolveNow asks the current resolver to resolve again, on a goroutine
// of its own: it is called from balancer callbacks and dials, and a
// resolver may report from inside ResolveNow, which waits for the
// balancer.
func (cc *ClientConn) resolveNow() {
	cc.mu.Lock()
	rc := cc.res
	cc.mu.Unlock()
	if rc != nil {
		go rc.resolveNow()
	}
}

// updateResolverState applies a resolver's state: it picks the service
// config (the resolver's, else the default one, as grpc-go does), builds
// or switches the balancer the config names, and gives it the state.
func (cc *ClientConn) updateResolverState(rc *resolverConn, s resolver.State) error {
	var given *serviceConfig
	givenErr, givenOK := error(nil), false
	if s.ServiceConfig != nil && s.ServiceConfig.Err == nil && !cc.opts.disableServiceConfig {
		given, givenOK, givenErr = cc.ownConfig(s.ServiceConfig.Config)
	}
	cc.mu.Lock()
	if cc.closed || rc != cc.res {
		cc.mu.Unlock()
		return nil
	}
	var ret error
	cfg := cc.defaultConfig()
	if !cc.opts.disableServiceConfig && s.ServiceConfig != nil {
		switch {
		case s.ServiceConfig.Err == nil && givenOK && givenErr == nil:
			cfg = given
			cc.resolverConfig = true
		case cc.resolverConfig:
			// A bad config after a good one: keep the one in force.
			ret = balancer.ErrBadResolverState
			cfg = cc.sc.Load()
		default:
			var err error
			switch {
			case s.ServiceConfig.Err != nil:
				err = status.Errorf(codes.Unavailable, "error parsing service config: %v", s.ServiceConfig.Err)
			case givenErr != nil:
				err = status.Errorf(codes.Unavailable, "error parsing service config: %v", givenErr)
			default:
				err = status.Errorf(codes.Unavailable, "illegal service config type: %T", s.ServiceConfig.Config)
			}
			cc.failLocked(err)
			cc.markResolvedLocked()
			cc.mu.Unlock()
			return balancer.ErrBadResolverState
		}
	}
	cc.sc.Store(cfg)
	cc.markResolvedLocked()
	cc.mu.Unlock()

	if s.Endpoints == nil && len(s.Addresses) > 0 {
		// Policies written for endpoints read only Endpoints: an
		// address is an endpoint of its own, as grpc-go hands them on.
		s.Endpoints = make([]resolver.Endpoint, len(s.Addresses))
		for i, a := range s.Addresses {
			s.Endpoints[i] = resolver.Endpoint{Addresses: []resolver.Address{a}, Attributes: a.BalancerAttributes}
		}
	}
	name, lbCfg := lbPolicy(cfg)
	var err error
	cc.ser.run(func() {
		bw, berr := cc.balancerFor(rc, name)
		if bw == nil {
			err = berr
			return
		}
		err = bw.bal.UpdateClientConnState(balancer.ClientConnState{ResolverState: s, BalancerConfig: lbCfg})
	})
	if ret == nil {
		ret = err
	}
	return ret
}

// balancerFor returns the balancer named name for the resolver rc, building
// it, or replacing a balancer of another name, as needed; nil when rc is
// no longer the ClientConn's. It runs in the serializer.
func (cc *ClientConn) balancerFor(rc *resolverConn, name string) (*balancerWrapper, error) {
	cc.mu.Lock()
	if cc.closed || rc != cc.res {
		cc.mu.Unlock()
		return nil, nil
	}
	bw := cc.bw
	cc.mu.Unlock()
	if bw != nil && bw.name == name {
		return bw, nil
	}
	nbw, err := cc.newBalancer(name)
	if err != nil {
		return nil, err
	}
	cc.mu.Lock()
	if cc.closed || rc != cc.res {
		cc.mu.Unlock()
		nbw.close()
		return nil, nil
	}
	cc.bw = nbw
	cc.mu.Unlock()
	if bw != nil {
		bw.close()
	}
	return nbw, nil
}

// resolverError hands a resolver's failure to the balancer; before there
// is one, calls fail with the error as it is (wait-for-ready calls wait).
func (cc *ClientConn) resolverError(rc *resolverConn, err error) {
	cc.ser.schedule(func() {
		cc.mu.Lock()
		if cc.closed || rc != cc.res {
			cc.mu.Unlock()
			return
		}
		cc.markResolvedLocked()
		bw := cc.bw
		if bw == nil {
			cc.failLocked(err)
			cc.mu.Unlock()
			return
		}
		cc.mu.Unlock()
		bw.bal.ResolverError(err)
	})
}

// defaultConfig is the service config of WithDefaultServiceConfig, nil
// without one.
func (cc *ClientConn) defaultConfig() *serviceConfig {
	return cc.defaultSC
}

// config returns the service config a call runs under. Before the
// resolver's first report the channel cannot know it: the call leaves
// idle mode and waits for that report, as grpc-go's calls do, whether or
// not they wait for ready.
// waited says the channel had no report yet when the call came (the call
// that takes it out of idle mode: its pick is a delayed one, as grpc-go
// reports it), delayed that the call had to wait for the report
// (RPCTagInfo.NameResolutionDelay); a resolver that reports while it is
// built (passthrough, dns for an address) delays nothing.
func (cc *ClientConn) config(ctx context.Context) (sc *serviceConfig, waited, delayed bool, err error) {
	if !cc.resolved.Load() {
		blocked, err := cc.waitResolved(ctx)
		if err != nil {
			return nil, true, false, err
		}
		waited, delayed = true, blocked
	}
	return cc.sc.Load(), waited, delayed, nil
}

// waitResolved waits for the resolver's first report; blocked says it had
// to wait, which it need not when a resolver that leaving idle mode built
// reported at once (the dns resolver for an IP address, passthrough), as
// grpc-go's RPCTagInfo.NameResolutionDelay tells.
func (cc *ClientConn) waitResolved(ctx context.Context) (blocked bool, err error) {
	cc.exitIdle()
	cc.mu.Lock()
	if cc.resolved.Load() {
		cc.mu.Unlock()
		return false, nil
	}
	if cc.closed {
		cc.mu.Unlock()
		return false, errConnClosing
	}
	if cc.resolvedCh == nil {
		cc.resolvedCh = make(chan struct{})
	}
	ch := cc.resolvedCh
	cc.mu.Unlock()
	cc.waitingPicks.Add(1)
	defer cc.waitingPicks.Add(-1)
	select {
	case <-ch:
		if cc.isClosed.Load() {
			return true, errConnClosing
		}
		return true, nil
	case <-ctx.Done():
		return true, status.FromContextError(ctx.Err()).Err()
	}
}

// markResolvedLocked records the resolver's first report (or failure)
// and wakes the calls waiting for it; mu must be held.
func (cc *ClientConn) markResolvedLocked() {
	if cc.resolved.Load() {
		return
	}
	cc.resolved.Store(true)
	if cc.resolvedCh != nil {
		close(cc.resolvedCh)
		cc.resolvedCh = nil
	}
}
