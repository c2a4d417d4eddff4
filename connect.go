package leangrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// How a ClientConn gets its connection: the resolver's addresses, tried in
// order until one connects (pick_first), off the call path in the dial
// goroutine that getConn starts.

// dial opens one connection and publishes it, or records the failure and
// the next retry time; it closes ch when done. Only one dial runs at a
// time (cc.dialing).
func (cc *ClientConn) dial(ch chan struct{}) {
	// The resolverConn is read once: going idle replaces it, but never
	// while a dial runs.
	cc.mu.Lock()
	rc := cc.res
	reresolve := cc.reresolve
	cc.reresolve = false
	cc.mu.Unlock()
	if reresolve {
		rc.resolveNow()
	}
	conn, p, addr, err := cc.connect(rc)
	var rerr resolverError
	if err != nil && !errors.As(err, &rerr) {
		// Every address failed: the names may have moved.
		rc.resolveNow()
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	defer close(ch)
	cc.dialing = nil
	cc.stateChangedLocked()
	if cc.closed {
		if conn != nil {
			conn.Close()
		}
		return
	}
	if err == nil && !rc.setInUse(addr) {
		// The resolver dropped the address while it was being dialed;
		// the next call dials the new list at once.
		conn.GracefulShutdown()
		cc.old = append(pruneDone(cc.old), conn)
		if cc.lastErr != nil {
			// In TRANSIENT_FAILURE nothing else would dial before
			// the retry timer, which this dial replaced.
			cc.startDialLocked()
		}
		return
	}
	if err != nil {
		cc.lastErr = err
		delay := cc.opts.backoff.delay(cc.retries)
		cc.retryAt = time.Now().Add(delay)
		cc.retries++
		cc.scheduleRetryLocked(delay)
		return
	}
	cc.retries = 0
	cc.retryAt = time.Time{}
	cc.lastErr = nil
	cc.setConn(conn, p)
}

// unavailable is the status of a call that found no connection, worded as
// grpc-go words it.
func unavailable(err error) error {
	var rerr resolverError
	if errors.As(err, &rerr) {
		return status.Error(codes.Unavailable, rerr.Error())
	}
	return status.Errorf(codes.Unavailable, "connection error: desc = %q", err)
}

// connect builds the resolver if it has not been built, waits for its first
// report, and dials its addresses in order; it returns the first
// connection made and its address, or the last error.
func (cc *ClientConn) connect(rc *resolverConn) (*h2conn.Conn, *peer.Peer, *resolver.Address, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cc.mu.Lock()
	if cc.closed {
		cancel()
	} else {
		cc.dialCancel = cancel
	}
	cc.mu.Unlock()
	defer func() {
		cc.mu.Lock()
		cc.dialCancel = nil
		cc.mu.Unlock()
		cancel()
	}()
	if err := cc.startResolver(rc); err != nil {
		return nil, nil, nil, err
	}
	if err := rc.waitFirst(ctx); err != nil {
		return nil, nil, nil, err
	}
	addrs, err := rc.snapshot()
	if err != nil {
		return nil, nil, nil, err
	}
	for i := range addrs {
		var conn *h2conn.Conn
		var p *peer.Peer
		conn, p, err = cc.connectAddr(ctx, addrs[i])
		if err == nil {
			return conn, p, &addrs[i], nil
		}
		if ctx.Err() != nil {
			break // closed
		}
	}
	return nil, nil, nil, err
}

// startResolver builds the target's resolver unless it is built. Build runs
// without the ClientConn's locks: resolvers may report from inside it.
func (cc *ClientConn) startResolver(rc *resolverConn) error {
	rc.mu.Lock()
	built := rc.r != nil
	rc.mu.Unlock()
	if built {
		return nil
	}
	r, err := cc.builder.Build(cc.parsedTarget(), rc, resolver.BuildOptions{
		DisableServiceConfig: true,
		DialCreds:            cc.opts.creds,
		CredsBundle:          cc.opts.bundle,
		Dialer:               cc.opts.dialer,
		Authority:            cc.authority,
	})
	if err != nil {
		return resolverError{err: err}
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

// addressesChanged is told by the resolver that its list changed; keep
// says whether it still holds the address of the connection in use. The
// resolver's lock is not held: this takes the ClientConn's. A
// connection to an address that left the list is drained (its calls
// finish) and the next call dials the new list; a ClientConn in backoff
// dials at once.
func (cc *ClientConn) addressesChanged(rc *resolverConn, keep bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed || rc != cc.res {
		return // a report of the resolver closed by going idle
	}
	if c := cc.conn; c != nil {
		if keep {
			return
		}
		cc.setConn(nil, nil)
		c.GracefulShutdown()
		cc.old = append(pruneDone(cc.old), c)
	}
	cc.retryNowLocked()
}

// connectAddr opens one connection to a, bounded by the connect timeout.
func (cc *ClientConn) connectAddr(parent context.Context, a resolver.Address) (*h2conn.Conn, *peer.Peer, error) {
	ctx, cancel := context.WithTimeout(parent, cc.opts.backoff.minConnectTimeout)
	defer cancel()
	var nc net.Conn
	var err error
	if cc.opts.dialer != nil {
		nc, err = cc.opts.dialer(ctx, cc.dialerAddr(a.Addr))
	} else {
		network, addr := "unix", a.Addr
		if !cc.unixScheme {
			network, addr = dialNetwork(addr)
		}
		var d net.Dialer
		nc, err = d.DialContext(ctx, network, addr)
	}
	// Failures are worded as grpc-go words them, so that a status
	// message reads the same on either stack.
	if err != nil {
		return nil, nil, fmt.Errorf("transport: Error while dialing: %w", err)
	}
	// The handshake names the server as grpc-go's does: WithAuthority,
	// else the address's ServerName, else the channel's authority.
	serverName := cc.authority
	if cc.opts.authority == "" && a.ServerName != "" {
		serverName = a.ServerName
	}
	var auth credentials.AuthInfo
	raw := nc
	nc, auth, err = cc.opts.creds.ClientHandshake(ctx, serverName, raw)
	if err != nil {
		raw.Close()
		return nil, nil, fmt.Errorf("transport: authentication handshake failed: %w", err)
	}
	if err := cc.checkConnCreds(auth); err != nil {
		nc.Close()
		return nil, nil, err
	}
	nc = secured(raw, nc)
	conn, err := h2conn.NewClientConn(nc, *cc.h2cfg)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if cc.stats != nil {
		cc.beginConnStats(conn, nc.LocalAddr(), nc.RemoteAddr())
	}
	return conn, &peer.Peer{Addr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr(), AuthInfo: auth}, nil
}

// dialerAddr is what a WithContextDialer function is given for addr. For
// the unix resolvers grpc-go hands it the address as a unix target again
// ("unix:///abs", "unix:rel", "unix:@abstract"), as it did before it had
// those resolvers, and leangrpc does the same.
func (cc *ClientConn) dialerAddr(addr string) string {
	if !cc.unixScheme || strings.HasPrefix(addr, "\x00") {
		return addr
	}
	if filepath.IsAbs(addr) {
		return "unix://" + addr
	}
	return "unix:" + addr
}

// dialNetwork returns the network and address to dial for an address from
// a resolver other than unix's, reading it as grpc-go's default dialer
// does: "unix:path" and the URLs "unix:/path", "unix:///path" and
// "unix://path" (what passthrough hands on from such a target) are Unix
// sockets; anything else is TCP.
func dialNetwork(addr string) (network, address string) {
	rest, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return "tcp", addr
	}
	if !strings.Contains(rest, ":/") && !strings.HasPrefix(rest, "/") {
		return "unix", rest
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "tcp", addr
	}
	if u.Path == "" {
		return "unix", u.Host
	}
	return "unix", u.Path
}
