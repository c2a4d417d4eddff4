//go:build linux && !leangrpcportable

package sockio

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// TLS connections idle without a goroutine.
//
// A tls.Conn may hold bytes that the socket no longer shows: decrypted
// plaintext a short Read left, and records it read ahead of the one it
// decrypted (it reads into all its buffer's free space). Readability of
// the socket alone then says nothing about whether the tls.Conn has bytes
// to give, and a reader cannot leave the wait to the idle poller.
//
// So the TLS handshake is given a recordConn instead of the raw conn: it
// parses the TLS record headers of what it reads (peeking at a header
// before it reads a record) and hands crypto/tls at most the rest of the
// current record per Read, reading exactly that from the socket, so that
// crypto/tls never holds bytes of a record after the one it asked for. And TLSConn reads the tls.Conn with a
// buffer that takes a whole record's plaintext (16 KiB), so that it leaves
// none behind. Then, whenever a read of the tls.Conn returned with a
// buffer it did not fill, everything the peer sent that the reader has not
// seen is still in the socket (or is the rest of a record crypto/tls has
// begun, which the socket brings), and the connection can wait for the
// socket's readability in the idle poller, holding no buffer of ours.
//
// Records that carry no application data (TLS 1.3's NewSessionTicket and
// KeyUpdate, alerts) are consumed by tls.Conn.Read, which then asks for the
// next record: at a record boundary, a read made for TLSConn's ReadReady
// reports an empty socket as a temporary error (which crypto/tls passes
// back without failing the connection) rather than block there.
//
// Reading exactly costs a system call for each record's header (the
// peek) and one for the record. crypto/tls keeps its own record buffers (rawInput, the
// records read, and outBuf, those written) for the connection's life.

// tlsReadSize is the least size of a TLSConn read: the largest plaintext
// of a record, so that a read takes all of a record's plaintext.
const tlsReadSize = 16 << 10

// recordHeaderLen is the length of a TLS record header: type, version,
// length.
const recordHeaderLen = 5

// ForTLSHandshake returns the conn to hand a TLS handshake over raw: on
// Linux with a socket descriptor, a conn that reads whole TLS records and
// nothing past them (see SecuredTLS); otherwise raw itself. The handshake's
// result then goes to SecuredTLS.
func ForTLSHandshake(raw net.Conn) net.Conn {
	c, ok := wrapRaw(raw, true).(*Conn)
	if !ok {
		return raw
	}
	r := &recordConn{Conn: raw, sock: c, exact: true}
	r.fn = r.readOnce
	return r
}

// SecuredTLS returns the conn the engine uses after a handshake that was
// given hs (ForTLSHandshake's) and returned c: a *TLSConn, which waits for
// the socket's readability under the TLS layer, when c is a *tls.Conn over
// hs; nil otherwise, after which hs reads as the raw conn does (c may read
// through it).
func SecuredTLS(hs, c net.Conn) net.Conn {
	r, ok := hs.(*recordConn)
	if !ok {
		return nil
	}
	tc, ok := c.(*tls.Conn)
	if !ok || tc.NetConn() != net.Conn(r) {
		r.exact = false // the handshake returned; nothing reads r meanwhile
		return nil
	}
	t := &TLSConn{Conn: tc, tc: tc, rec: r}
	t.vec.Conn = tc
	return t
}

// recordConn is the raw conn as a TLS handshake and its tls.Conn see it:
// with exact set, each Read returns bytes of one record header or body
// only, read from the socket without read-ahead. Reads are serialised by
// the tls.Conn.
//
// Every TLS connection holds one for its life; the small fields sit
// together so that it fits the 128-byte size class.
type recordConn struct {
	net.Conn // the raw conn: addresses, deadlines
	sock     *Conn
	left     int // bytes of the current record's body not yet read

	hdr   [recordHeaderLen]byte // the current record header, hdrN bytes of it read
	hdrN  uint8
	exact bool

	// try makes a read at a record boundary that finds the socket empty
	// return errNoRecord rather than wait; set by TLSConn around its reads.
	try bool

	// The state of one read, for readOnce.
	peek     [recordHeaderLen]byte
	boundary bool
	tryNow   bool
	nothing  bool // readOnce found the socket empty in a try
	fn       func(fd uintptr) bool
	p, p0    []byte // the target as readOnce limits it, and as Read gave it
	n        int
	err      error
}

// errNoRecord is what a try read at a record boundary returns when the
// socket is empty: temporary, so that crypto/tls returns it without
// failing the connection.
var errNoRecord = &noRecordError{}

type noRecordError struct{}

func (*noRecordError) Error() string   { return "sockio: no TLS record to read" }
func (*noRecordError) Timeout() bool   { return true }
func (*noRecordError) Temporary() bool { return true }

func (r *recordConn) Read(p []byte) (int, error) {
	if !r.exact {
		return r.sock.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	boundary := r.left == 0 && r.hdrN == 0
	switch {
	case boundary:
		// readOnce limits p to the record, once it peeked at its header.
	case r.left == 0:
		p = p[:min(len(p), recordHeaderLen-int(r.hdrN))]
	default:
		p = p[:min(len(p), r.left)]
	}
	n, err := r.read(p, boundary, r.try && boundary)
	r.account(r.p0[:n])
	r.p0 = nil
	return n, err
}

// account follows the record framing over the bytes just read: the rest
// of a header, of a body, or a whole record.
func (r *recordConn) account(p []byte) {
	for len(p) > 0 {
		if r.left > 0 {
			k := min(r.left, len(p))
			r.left -= k
			p = p[k:]
			continue
		}
		k := copy(r.hdr[r.hdrN:], p)
		r.hdrN += uint8(k)
		p = p[k:]
		if r.hdrN == recordHeaderLen {
			r.hdrN = 0
			r.left = int(r.hdr[3])<<8 | int(r.hdr[4])
		}
	}
}

// read makes one read from the socket into p, waiting in the poller for
// bytes unless try is set; at a record boundary, of one record at most.
// The bytes read are r.p0[:n].
func (r *recordConn) read(p []byte, boundary, try bool) (int, error) {
	if err := r.sock.disarm(); err != nil {
		return 0, opError(r.Conn, "read", err)
	}
	r.p, r.p0, r.n, r.err, r.boundary, r.tryNow, r.nothing = p, p, 0, nil, boundary, try, false
	err := r.sock.w.rc.Read(r.fn)
	n, rerr, nothing := r.n, r.err, r.nothing
	r.p, r.err = nil, nil // r.p0 stays for Read's accounting
	switch {
	case err != nil:
		return 0, rawOpErr(err)
	case nothing:
		return 0, errNoRecord
	case rerr != nil:
		return 0, opError(r.Conn, "read", rerr)
	}
	return n, nil
}

// readOnce is read's RawConn.Read callback. At a record boundary it
// peeks at the next record's header first and reads up to the end of that
// record: crypto/tls asks for a header and then for the body, and a
// record read whole at the first ask spares the second (and its
// allocation).
func (r *recordConn) readOnce(fd uintptr) bool {
	if r.boundary {
		m, e := sockCall(unix.SYS_RECVFROM, fd, unsafe.Pointer(&r.peek[0]), recordHeaderLen, syscall.MSG_PEEK)
		switch {
		case e == syscall.EINTR:
			return r.readOnce(fd)
		case e == 0 && m == recordHeaderLen:
			n := recordHeaderLen + (int(r.peek[3])<<8 | int(r.peek[4]))
			r.p = r.p[:min(len(r.p), n)]
		case e == 0 && m > 0:
			r.p = r.p[:min(len(r.p), int(m))] // part of a header so far
		}
		// Otherwise (empty, the peer's end, an error) the read says so.
	}
	n, err := readSome(fd, r.p)
	if err == syscall.EAGAIN {
		if r.tryNow {
			r.nothing = true
			return true
		}
		return false
	}
	r.n, r.err = n, err
	return true
}

// Write writes p to the socket as Conn.Write does.
func (r *recordConn) Write(p []byte) (int, error) { return r.sock.Write(p) }

// Close closes the socket through the sockio Conn, which runs a callback
// armed with OnReadable.
func (r *recordConn) Close() error { return r.sock.Close() }

// OnReadable arms the idle poller for the socket before the handshake
// (Conn.OnReadable): a server waits for a ClientHello without a goroutine.
// Nothing may read r until fn runs.
func (r *recordConn) OnReadable(fn func()) error { return r.sock.OnReadable(fn) }

// NetConn returns the raw conn.
func (r *recordConn) NetConn() net.Conn { return r.Conn }

func (*recordConn) sockioWrapper() {}

// TLSConn is a TLS connection whose reader waits for the readability of the
// socket under the TLS layer, holding no buffer while it waits, and can
// leave that wait to the idle poller (OnReadable). SecuredTLS returns it;
// Wrap returns it as it is. It offers h2conn's reader ReadReady,
// ReadReadyWithin, TryReadReady and OnReadable, and WriteVec.
type TLSConn struct {
	net.Conn // tc: Write, Close, the deadlines and addresses are the tls.Conn's
	tc       *tls.Conn
	rec      *recordConn
	vec      FallbackConn // WriteVec, joining slices into records

	// pending says that the last read filled its buffer, so that the
	// tls.Conn may hold plaintext the socket no longer shows; owned by the
	// reading goroutine.
	pending bool
	peek    [1]byte // waitOnce's target
	waitFn  func(fd uintptr) bool
}

// Read reads plaintext from the tls.Conn, waiting for it, after clearing a
// read deadline that ReadReadyWithin left armed.
func (t *TLSConn) Read(p []byte) (int, error) {
	if err := t.rec.sock.disarm(); err != nil {
		return 0, opError(t.rec.Conn, "read", err)
	}
	n, err := t.tc.Read(p)
	t.pending = n > 0 && n == len(p)
	return n, err
}

// WriteVec writes all of bufs through the tls.Conn, gathering small slices
// into one record (FallbackConn.WriteVec).
func (t *TLSConn) WriteVec(bufs [][]byte) (int64, error) { return t.vec.WriteVec(bufs) }

// ReadReady waits until the tls.Conn has plaintext to give, holding no
// buffer while it waits, then reads it into a buffer of at least size
// bytes (and at least a record's plaintext) taken from pool at that moment.
// It returns as Conn.ReadReady does.
func (t *TLSConn) ReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	if err := t.rec.sock.disarm(); err != nil {
		return nil, opError(t.rec.Conn, "read", err)
	}
	return t.readReady(pool, size, 0, false)
}

// TryReadReady is ReadReady without the wait: a nil buffer and a nil
// error when the tls.Conn has no plaintext to give at once.
func (t *TLSConn) TryReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	if err := t.rec.sock.disarm(); err != nil {
		return nil, opError(t.rec.Conn, "read", err)
	}
	return t.readReady(pool, size, 0, true)
}

// ReadReadyWithin is ReadReady that waits at most about d (see
// Conn.ReadReadyWithin, whose read deadline it shares): a nil buffer and a
// nil error when no plaintext came by then.
func (t *TLSConn) ReadReadyWithin(pool *bufpool.Pool, size int, d time.Duration) (*bufpool.Buffer, error) {
	return t.readReady(pool, size, d, false)
}

// readReady reads the tls.Conn, at a record boundary only as far as the
// socket has bytes, and waits for the socket's readability in between.
func (t *TLSConn) readReady(pool *bufpool.Pool, size int, within time.Duration, try bool) (*bufpool.Buffer, error) {
	if pool == nil {
		pool = bufpool.Default()
	}
	size = max(size, tlsReadSize)
	for {
		b := pool.Get(size)
		t.rec.try = true
		n, err := t.tc.Read(b.Bytes())
		t.rec.try = false
		t.pending = n == len(b.Bytes())
		if n > 0 {
			// An error with bytes (a close_notify after them) comes
			// again from the next read.
			b.SetLen(n)
			return b, nil
		}
		b.Free()
		switch {
		case errors.Is(err, errNoRecord):
		case within > 0 && errors.Is(err, os.ErrDeadlineExceeded):
			// The bound ran out inside a record: the rest wakes the
			// socket.
			if derr := t.rec.sock.disarm(); derr != nil {
				return nil, opError(t.rec.Conn, "read", derr)
			}
			return nil, nil
		case err != nil:
			return nil, err
		default:
			continue // a record with no plaintext
		}
		if try {
			return nil, nil
		}
		ok, err := t.waitReadable(within)
		if err != nil || !ok {
			return nil, err
		}
	}
}

// waitReadable waits until the socket has bytes (or failed, or the peer
// closed it), for at most about within when it is positive: false and no
// error when the bound ran out first.
func (t *TLSConn) waitReadable(within time.Duration) (bool, error) {
	s := t.rec.sock
	if within > 0 {
		now := monoNow()
		if left := s.rdl - now; s.rdl == 0 || left < int64(within/2) || left > int64(within) {
			if err := s.arm(now, within); err != nil {
				return false, opError(s.Conn, "read", err)
			}
		}
	}
	if t.waitFn == nil {
		t.waitFn = t.waitOnce
	}
	err := s.w.rc.Read(t.waitFn)
	if err == nil {
		return true, nil
	}
	timedOut := errors.Is(err, os.ErrDeadlineExceeded)
	if derr := s.disarm(); derr != nil && timedOut {
		return false, opError(s.Conn, "read", derr)
	}
	if timedOut && within > 0 {
		return false, nil
	}
	return false, rawOpErr(err)
}

// waitOnce is waitReadable's RawConn.Read callback: it peeks at the
// socket, and parks while it is empty. The peek is made after the
// runtime reset the readiness flag, so bytes that came before the wait
// are seen (see readCall.readOnce).
func (t *TLSConn) waitOnce(fd uintptr) bool {
	for {
		_, e := sockCall(unix.SYS_RECVFROM, fd, unsafe.Pointer(&t.peek[0]), 1, syscall.MSG_PEEK)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true // bytes, the peer's end or an error: the read sees it
	}
}

// OnReadable arranges for fn to run once, on a new goroutine, when the
// tls.Conn may have plaintext to give: at once if the last read filled its
// buffer, else when the socket under it becomes readable (Conn.OnReadable).
func (t *TLSConn) OnReadable(fn func()) error {
	if t.pending {
		go fn()
		return nil
	}
	return t.rec.sock.OnReadable(fn)
}

// AwaitsReadable reports whether a callback armed with OnReadable waits to
// run (Conn.AwaitsReadable).
func (t *TLSConn) AwaitsReadable() bool { return t.rec.sock.AwaitsReadable() }

// TLS returns the tls.Conn.
func (t *TLSConn) TLS() *tls.Conn { return t.tc }

func (*TLSConn) sockioTLS() {}
