//go:build linux && !leangrpcportable

package sockio

import (
	"io"
	"net"
	"syscall"
)

// ForSniff returns raw wrapped so that its first bytes can be awaited in
// the idle poller (OnReadable) and looked at without taking them from the
// socket (Peek): a *Conn, on Linux with a socket descriptor; nil
// otherwise. A server that must tell HTTP/2 from HTTP/1.1 by a plaintext
// connection's first bytes waits for them as an idle connection waits,
// with no goroutine. Give the result, not raw, to Wrap or Close
// afterwards: it is in the idle poller's set.
func ForSniff(raw net.Conn) net.Conn {
	c, ok := wrapRaw(raw, true).(*Conn)
	if !ok {
		return nil
	}
	return c
}

// Peek copies what the socket has received into p without taking it and
// without waiting: (0, nil) when nothing came yet, io.EOF once the peer
// closed its side with nothing sent.
func (c *Conn) Peek(p []byte) (int, error) {
	var n int
	var err error
	rerr := c.w.rc.Read(func(fd uintptr) bool {
		for {
			n, _, err = syscall.Recvfrom(int(fd), p, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err != syscall.EINTR {
				return true
			}
		}
	})
	switch {
	case rerr != nil:
		return 0, opError(c.Conn, "read", rerr)
	case err == syscall.EAGAIN:
		return 0, nil
	case err != nil:
		return 0, opError(c.Conn, "read", err)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}
