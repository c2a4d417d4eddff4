package leangrpc

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
)

// How a SubConn opens a connection: dialing (WithContextDialer's function
// or the network the address names), the credentials' handshake, and the
// HTTP/2 preface, bounded by the connect timeout.

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
		if d := cc.opts.dial; d != nil && d.failOnNonTemp {
			// grpc-go's own wording in this mode differs by a capital.
			return nil, nil, fmt.Errorf("transport: error while dialing: %w", err)
		}
		return nil, nil, fmt.Errorf("transport: Error while dialing: %w", err)
	}
	// The handshake names the server as grpc-go's does: WithAuthority,
	// else the address's ServerName, else the channel's authority.
	serverName := cc.authority
	if !cc.opts.authoritySet && a.ServerName != "" {
		serverName = a.ServerName
	}
	var auth credentials.AuthInfo
	raw := forHandshake(nc, cc.opts.creds, cc.h2cfg.Load().PooledReads)
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
	conn, err := h2conn.NewClientConn(nc, *cc.h2cfg.Load())
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

// pingedTooOften is told that a server closed a connection with GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings": the channel's later connections
// ping at twice the configured keepalive time, as grpc-go's do.
func (cc *ClientConn) pingedTooOften() {
	for {
		cur := cc.h2cfg.Load()
		t := 2 * cc.opts.keepaliveTime
		if t <= cur.KeepaliveTime {
			return
		}
		next := *cur
		next.KeepaliveTime = t
		if cc.h2cfg.CompareAndSwap(cur, h2conn.SharedConfig(next)) {
			logger.Warningf("server answered keepalive pings with GOAWAY too_many_pings; keepalive time is now %v", t)
			return
		}
	}
}
