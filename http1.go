package leangrpc

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/leangrpc/leangrpc/internal/budget"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc/credentials"
)

// HTTP/1.1 on the server's own listener.
//
// A connection that does not speak HTTP/2 is handed to net/http, which
// serves it with ServeHTTP: the web protocols' unary and server-streaming
// calls, and the HTTPHandler option's handler. leangrpc parses no
// HTTP/1.1 itself. A plaintext connection is told by its first bytes (an
// HTTP/1.1 request line begins with a method and a space, the HTTP/2
// preface with "PRI *"; anything else goes to the engine, which answers a
// bad preface with GOAWAY as RFC 9113 asks); on Linux they are
// awaited in the idle poller and peeked at, so a client that connects and
// sends nothing holds no goroutine, as with the TLS handshake's wait. A TLS
// connection is told by ALPN: "http/1.1" goes to net/http, anything else
// (grpc-go's credentials insist on ALPN) is HTTP/2.

// sniffsHTTP1 reports whether plaintext connections are sniffed: when
// there is anything but gRPC to serve them.
func (s *Server) sniffsHTTP1() bool { return s.opts.webProtocols || s.opts.httpHandler != nil }

// sniffLen is how many first bytes tell HTTP/1.1 from HTTP/2: the
// longest method and its space.
const sniffLen = len("OPTIONS ")

// http1Methods are the request lines' starts that make a connection
// HTTP/1.1.
var http1Methods = [...]string{"GET ", "POST ", "PUT ", "HEAD ", "OPTIONS ", "DELETE ", "PATCH ", "CONNECT ", "TRACE "}

// isHTTP1Start reports whether p, a connection's first bytes, begin an
// HTTP/1.1 request line; more reports that p is too short to tell yet.
func isHTTP1Start(p []byte) (yes, more bool) {
	for _, m := range http1Methods {
		if bytes.HasPrefix(p, []byte(m)) {
			return true, false
		}
		if len(p) < len(m) && bytes.HasPrefix([]byte(m), p) {
			more = true
		}
	}
	return false, more
}

// peeker is sockio's ForSniff conn.
type peeker interface{ Peek(p []byte) (int, error) }

// sniff runs once a plaintext connection's first bytes came (or it closed,
// or its deadline passed): it starts the engine on it, or hands it to
// net/http.
func (p *pendingHandshake) sniff() {
	s := p.s
	var first [sniffLen]byte
	var n int
	var err error
	conn := p.hs
	if pk, ok := p.hs.(peeker); ok {
		n, err = pk.Peek(first[:])
	} else {
		// The portable path: read them on this goroutine, until they
		// tell, and give them back to whoever serves the connection.
		p.raw.SetReadDeadline(p.deadline)
		for n < sniffLen {
			var k int
			k, err = p.raw.Read(first[n:])
			n += k
			if _, more := isHTTP1Start(first[:n]); err != nil || !more {
				break
			}
		}
		p.raw.SetReadDeadline(time.Time{})
		if n > 0 {
			conn = &replayConn{Conn: p.raw, first: append([]byte(nil), first[:n]...)}
			err = nil
		}
	}
	s.mu.Lock()
	_, live := s.pending[p]
	delete(s.pending, p)
	s.mu.Unlock()
	s.h2cfg.Budget.Charge(-budget.GreetingBytes) // startConn charges its own
	if err != nil || !live {
		conn.Close()
		s.connWG.Done()
		return
	}
	if h1, _ := isHTTP1Start(first[:n]); !h1 {
		// Also when too few bytes came to tell (clients send a request
		// line or the preface in one write): the engine reads the rest of
		// the preface, or refuses it.
		s.startConn(conn, nil, p.deadline)
		return
	}
	s.connWG.Done()
	s.handToHTTP1(conn, nil)
}

// replayConn is a conn whose first bytes were read already: its reads
// return them first.
type replayConn struct {
	net.Conn
	first []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// http1Server is the net/http server the own listener hands HTTP/1.1
// connections to, started with the first.
type http1Server struct {
	once sync.Once
	hs   *http.Server
	q    *connQueue
}

// handToHTTP1 hands c, secured by auth (nil: plaintext), to net/http.
func (s *Server) handToHTTP1(c net.Conn, auth credentials.AuthInfo) {
	if !s.sniffsHTTP1() {
		c.Close()
		return
	}
	h := &s.h1
	h.once.Do(func() {
		h.q = &connQueue{ch: make(chan net.Conn), done: make(chan struct{}), addr: c.LocalAddr()}
		h.hs = &http.Server{
			Handler:           s,
			ReadHeaderTimeout: s.opts.connTimeout,
			MaxHeaderBytes:    int(s.h2cfg.MaxHeaderListSize),
			IdleTimeout:       idleTimeout(s.opts.kp.MaxConnectionIdle),
			ErrorLog:          log.New(io.Discard, "", 0),
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				if ac, ok := c.(*authConn); ok {
					return context.WithValue(ctx, handedAuthKey{}, ac.auth)
				}
				return ctx
			},
			Protocols: new(http.Protocols),
		}
		h.hs.Protocols.SetHTTP1(true)
		go h.hs.Serve(h.q)
	})
	if h.hs == nil { // the server stopped first
		c.Close()
		return
	}
	if auth != nil {
		c = &authConn{Conn: c, auth: auth}
	}
	select {
	case h.q.ch <- c:
	case <-h.q.done:
		c.Close()
	}
}

// idleTimeout is how long net/http keeps an idle HTTP/1.1 connection: the
// server's MaxConnectionIdle when set, else two minutes.
func idleTimeout(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return 2 * time.Minute
}

// stopHTTP1 closes the HTTP/1.1 side: at once, or, when graceful, once
// its requests are done.
func (s *Server) stopHTTP1(graceful bool) {
	h := &s.h1
	h.once.Do(func() {}) // none started after this
	if h.hs == nil {
		return
	}
	h.q.Close()
	if graceful {
		h.hs.Shutdown(context.Background())
		return
	}
	h.hs.Close()
}

// authConn is a secured conn handed to net/http with its AuthInfo, which
// ServeHTTP gives the call's peer.
type authConn struct {
	net.Conn
	auth credentials.AuthInfo
}

// connQueue is the listener net/http serves handed connections from.
type connQueue struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// forSniff returns the conn to sniff nc through: sockio's, which waits
// for the first bytes in the idle poller and peeks at them, or nc.
func forSniff(nc net.Conn, pooled bool) net.Conn {
	if pooled {
		if c := sockio.ForSniff(nc); c != nil {
			return c
		}
	}
	return nc
}
