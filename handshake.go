package leangrpc

import (
	"net"
	"time"

	"github.com/leangrpc/leangrpc/internal/budget"
	"google.golang.org/grpc/credentials"
)

// Credentials handshakes, and those that wait for their first bytes
// without a goroutine.
//
// A TLS handshake blocks its goroutine in a read until the ClientHello
// comes, so a peer that connects and sends nothing would hold a goroutine
// (and its grown stack) for ConnectionTimeout. On Linux, sockio's
// handshake conn can hand that first wait to the idle poller: the accept
// goroutine returns, and the poller starts the handshake on a new goroutine
// once the socket is readable (or closed). Until then the connection holds
// its socket, a pendingHandshake and one runtime timer, which closes it at
// the deadline. A peer that sends part of a ClientHello and stops holds a
// goroutine inside crypto/tls, and crypto/tls's record buffer, until the
// same deadline: crypto/tls reads a record on its own goroutine.
//
// Every handshake in progress, waiting or running, is in Server.pending,
// so that Stop and GracefulStop close it rather than wait for its
// deadline.

// readableNotifier is sockio's handshake conn on Linux.
type readableNotifier interface{ OnReadable(fn func()) error }

// pendingHandshake is an accepted connection whose credentials handshake
// has not ended.
type pendingHandshake struct {
	s        *Server
	raw, hs  net.Conn // the accepted conn, and forHandshake's over it
	deadline time.Time
	timer    *time.Timer // closes hs at deadline while it waits in the idle poller; nil otherwise
}

// handshakeConn runs the credentials handshake of the accepted conn nc,
// on this goroutine or, once the client's first bytes come, on one the
// idle poller starts; then it starts the HTTP/2 connection.
func (s *Server) handshakeConn(nc net.Conn) {
	p := &pendingHandshake{s: s, raw: nc, deadline: time.Now().Add(s.opts.connTimeout)}
	if s.opts.creds == nil {
		// No handshake: a sniff of the first bytes (http1.go), whose
		// wait is charged to the budget as a greeting's is.
		p.hs = forSniff(nc, s.h2cfg.PooledReads)
		s.h2cfg.Budget.Charge(budget.GreetingBytes)
	} else {
		p.hs = forHandshake(nc, s.opts.creds, s.h2cfg.PooledReads)
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		p.hs.Close()
		s.connWG.Done()
		return
	}
	s.pending[p] = struct{}{}
	rn, ok := p.hs.(readableNotifier)
	if ok && s.opts.creds == nil && firstBytesCame(p.hs) {
		ok = false // sniff them now, without a wait in the idle poller
	}
	if ok {
		// Armed under mu, so that run (which takes mu first) finds it.
		p.timer = time.AfterFunc(time.Until(p.deadline), p.expire)
	}
	s.mu.Unlock()
	if ok && rn.OnReadable(p.run) == nil {
		return
	}
	// No idle poller, or it failed, or a stop or the timer closed hs
	// meanwhile (the handshake then fails at once): run will not be
	// called.
	p.run()
}

// firstBytesCame reports whether a sniffed conn's first bytes are there
// already, as they usually are by the time a connection is accepted.
func firstBytesCame(c net.Conn) bool {
	pk, ok := c.(peeker)
	if !ok {
		return false
	}
	var b [1]byte
	n, err := pk.Peek(b[:])
	return n > 0 || err != nil
}

// run runs the handshake: the idle poller's callback once the first bytes
// came or hs was closed, or handshakeConn's.
func (p *pendingHandshake) run() {
	s := p.s
	s.mu.Lock()
	t := p.timer
	p.timer = nil
	s.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	if s.opts.creds == nil {
		p.sniff()
		return
	}
	p.raw.SetDeadline(p.deadline)
	// The handshake's state is charged to the budget while it runs
	// (budget.HandshakeBytes).
	s.h2cfg.Budget.Charge(budget.HandshakeBytes)
	c, auth, err := s.opts.creds.ServerHandshake(p.hs)
	s.h2cfg.Budget.Charge(-budget.HandshakeBytes)
	p.raw.SetDeadline(time.Time{})
	s.mu.Lock()
	_, live := s.pending[p]
	delete(s.pending, p)
	s.mu.Unlock()
	if err == nil && !live {
		// A stop closed hs as the handshake ended.
		c.Close()
		err = net.ErrClosed
	}
	if err != nil {
		// A conn the credentials dispatched elsewhere is theirs
		// now: left open, as grpc-go leaves it, without the
		// handshake's deadline.
		if err != credentials.ErrConnDispatched {
			p.raw.Close()
		}
		s.connWG.Done()
		return
	}
	if alpn(auth) == "http/1.1" {
		s.connWG.Done()
		s.handToHTTP1(c, auth)
		return
	}
	s.startConn(secured(p.hs, c), auth, p.deadline)
}

// alpn is the protocol a TLS handshake negotiated, "" for other
// credentials.
func alpn(auth credentials.AuthInfo) string {
	if ti, ok := auth.(credentials.TLSInfo); ok {
		return ti.State.NegotiatedProtocol
	}
	return ""
}

// expire closes a connection whose first bytes did not come by the
// deadline: the idle poller's callback runs and the handshake fails.
func (p *pendingHandshake) expire() { p.hs.Close() }

// takePendingLocked empties the pending handshakes, for a stop to close.
func (s *Server) takePendingLocked() []*pendingHandshake {
	ps := make([]*pendingHandshake, 0, len(s.pending))
	for p := range s.pending {
		ps = append(ps, p)
	}
	clear(s.pending)
	return ps
}

// closePending closes the pending handshakes' conns: a handshake running
// fails, and a waiting one's idle poller callback runs and fails.
func closePending(ps []*pendingHandshake) {
	for _, p := range ps {
		p.hs.Close()
	}
}
