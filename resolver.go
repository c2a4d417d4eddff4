package leangrpc

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// Name resolution runs through grpc-go's public resolver plug-in API: the
// target's resolver.Builder builds a resolver.Resolver that reports to a
// resolverConn, which keeps the addresses in an addrList. The ClientConn
// builds the resolver on its first dial (as grpc-go's does when it leaves
// idle) and reads the list only when it dials, so a call on a connected
// ClientConn never touches any of it.

// addrList is the addresses the resolver gave and the one in use. It is
// what a load balancer will take over; for now the ClientConn connects to
// the addresses one at a time in order and keeps the first that connects
// (pick_first).
type addrList struct {
	addrs []resolver.Address
	// err is the resolver's error while it has given no addresses, nil
	// otherwise; updated is set once it has given a state, even an empty
	// one.
	err     error
	updated bool
	// inUse points at the address of the ClientConn's latest
	// connection in the list it came from (nil before the first): a
	// pointer, not a copy, keeps an Address's 64 bytes out of every
	// ClientConn.
	inUse *resolver.Address
}

// has reports whether a is in the list, compared as grpc-go compares the
// addresses of a connection: by Addr and ServerName.
func (l *addrList) has(a resolver.Address) bool {
	for _, b := range l.addrs {
		if a.Addr == b.Addr && a.ServerName == b.ServerName {
			return true
		}
	}
	return false
}

// sameAddrs reports whether a and b list the same addresses in the same
// order. A resolver that answers every ResolveNow with the list it gave
// before changes nothing: the ClientConn keeps its backoff, rather than
// dial again at once after every failed round.
func sameAddrs(a, b []resolver.Address) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Addr != b[i].Addr || a[i].ServerName != b[i].ServerName {
			return false
		}
	}
	return true
}

// resolverConn is the resolver.ClientConn a resolver reports to.
type resolverConn struct {
	cc *ClientConn

	// callMu serializes the calls into the resolver, ResolveNow and Close,
	// as grpc-go does: no resolver sees ResolveNow during or after its
	// Close. It is never held while taking the ClientConn's mu, and the
	// resolver may report while it is held.
	callMu sync.Mutex

	mu   sync.Mutex // guards the fields below
	list addrList
	// reported is set by the resolver's first report (addresses or an
	// error). A dial that finds it unset waits on first, made then: most
	// resolvers report from inside Build and no channel is needed.
	reported bool
	first    chan struct{}
	closed   bool
	r        resolver.Resolver // nil until Build returns
}

func newResolverConn(cc *ClientConn) *resolverConn {
	return &resolverConn{cc: cc}
}

// errZeroAddresses is what grpc-go's pick_first reports for an update
// without addresses.
var errZeroAddresses = errors.New("produced zero addresses")

// resolverError is a resolver's failure as a call sees it: the call fails
// with Unavailable and this text. grpc-go's text depends on when the
// resolver failed: before its first state no balancer exists and the call
// gets the resolver's error as it is (and so does a failed Build); after
// one, pick_first words it "name resolver error: ...".
type resolverError struct {
	err      error
	balancer bool // worded as pick_first words it
}

func (e resolverError) Error() string {
	if e.balancer {
		return "name resolver error: " + e.err.Error()
	}
	return e.err.Error()
}

func (e resolverError) Unwrap() error { return e.err }

// UpdateState takes a resolver's new addresses: those of its endpoints
// when it gives endpoints, else its Addresses. An update without any
// counts as an error and returns balancer.ErrBadResolverState, which tells
// resolvers such as dns to try again later.
func (rc *resolverConn) UpdateState(s resolver.State) error {
	// The resolver hands the slices over (grpc-go keeps them too), so
	// Addresses is kept as it is rather than copied.
	addrs := s.Addresses
	if len(s.Endpoints) > 0 {
		addrs = nil
		for _, ep := range s.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
	}
	rc.mu.Lock()
	if rc.closed {
		rc.mu.Unlock()
		return nil
	}
	changed := !sameAddrs(rc.list.addrs, addrs)
	rc.list.addrs = addrs
	rc.list.updated = true
	rc.list.err = nil
	if len(addrs) == 0 {
		rc.list.err = errZeroAddresses
	}
	keep := rc.list.inUse != nil && rc.list.has(*rc.list.inUse)
	rc.signalFirst()
	rc.mu.Unlock()
	if changed {
		rc.cc.addressesChanged(rc, keep)
	}
	if len(addrs) == 0 {
		return balancer.ErrBadResolverState
	}
	return nil
}

// ReportError takes a resolver's error. As under pick_first it is ignored
// while earlier addresses are known; without them calls fail with it.
func (rc *resolverConn) ReportError(err error) {
	rc.mu.Lock()
	if rc.closed || len(rc.list.addrs) > 0 {
		rc.mu.Unlock()
		return
	}
	rc.list.err = err
	rc.signalFirst()
	rc.mu.Unlock()
}

// NewAddress is the deprecated form of UpdateState.
func (rc *resolverConn) NewAddress(addrs []resolver.Address) {
	rc.UpdateState(resolver.State{Addresses: addrs})
}

// errServiceConfig is what ParseServiceConfig answers: leangrpc applies no
// service config yet, and says so rather than accept one and ignore it.
var errServiceConfig = errors.New("leangrpc: service config is not supported")

// ParseServiceConfig refuses every service config (see errServiceConfig).
// Resolvers are built with BuildOptions.DisableServiceConfig set, so the
// ones that honour it (dns) do not ask.
func (rc *resolverConn) ParseServiceConfig(string) *serviceconfig.ParseResult {
	return &serviceconfig.ParseResult{Err: errServiceConfig}
}

// signalFirst records the first report and wakes a dial waiting for it;
// mu must be held.
func (rc *resolverConn) signalFirst() {
	if !rc.reported {
		rc.reported = true
		if rc.first != nil {
			close(rc.first)
		}
	}
}

// waitFirst waits for the resolver's first report, or for ctx to end.
func (rc *resolverConn) waitFirst(ctx context.Context) error {
	rc.mu.Lock()
	if rc.reported {
		rc.mu.Unlock()
		return nil
	}
	if rc.first == nil {
		rc.first = make(chan struct{})
	}
	first := rc.first
	rc.mu.Unlock()
	select {
	case <-first:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// snapshot returns the current addresses (shared, not to be modified) or
// the resolver's error.
func (rc *resolverConn) snapshot() ([]resolver.Address, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.list.addrs) == 0 {
		err := rc.list.err
		if err == nil {
			err = errZeroAddresses
		}
		return nil, resolverError{err: err, balancer: rc.list.updated}
	}
	return rc.list.addrs, nil
}

// setInUse records a as the address of the ClientConn's new connection
// and reports whether the resolver still lists it. The ClientConn's mu is
// held: it is taken before rc.mu, never after.
func (rc *resolverConn) setInUse(a *resolver.Address) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.list.has(*a) {
		return false
	}
	rc.list.inUse = a
	return true
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
