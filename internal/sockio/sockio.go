// Package sockio is leangrpc's socket I/O: reads that wait for readability
// without holding a buffer and take one from the pool only when bytes are
// there, vectored writes, and socket options.
//
// The engine sees the socket through a few capabilities, each an interface
// that a wrapped conn implements or not, found by type assertion where they
// are used: WriteVec (every wrapper), ReadReady, TryReadReady and
// ReadReadyWithin (the waits of h2conn's reader), ReadEach (reads in one
// callback, with a ReadHandler), FlushReadyWithin (with a Flusher),
// OnReadable (the idle poller) and ReadFull (the rest of a frame, under a
// receive low-water mark). The interfaces the engine hands to sockio,
// ReadHandler and Flusher, are declared here, on every platform. A conn without a capability is
// read the portable way: a reader goroutine in Read, with one read buffer
// per connection, parked in Read while the connection is idle.
//
// Wrap picks one of four paths for a connection:
//   - Linux, a conn exposing syscall.Conn (TCP, Unix), pooled reads on:
//     *Conn, with every capability above (sys_conn_linux.go,
//     readeach_linux.go, idle_linux.go, lowwater_linux.go);
//   - the same with pooled reads off: *VecConn, WriteVec only;
//   - Linux, a TLS conn whose handshake was given ForTLSHandshake's conn:
//     the *TLSConn SecuredTLS returns, with ReadReady, ReadReadyWithin,
//     TryReadReady and OnReadable, waiting for the socket under TLS
//     (tls_linux.go);
//   - every other OS, conns without a descriptor (net.Pipe, other TLS, any
//     conn from a custom dialer), and every conn in a build with the
//     leangrpcportable tag: *FallbackConn, whose WriteVec goes through
//     net.Buffers.WriteTo. The tag exists so that the portable path,
//     which serves macOS, Windows and the BSDs, runs the whole test suite
//     on Linux too.
//
// Each wrapper embeds the net.Conn it wraps, so Read, Write, Close, the
// deadlines and the addresses are the conn's own.
package sockio

import (
	"net"
	"os"
	"strconv"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// ReadHandler takes the bytes ReadEach reads.
type ReadHandler interface {
	// HandleRead is given the bytes of one read (b holds them, Len of
	// them; ownership passes to the ReadHandler) on the goroutine that
	// called ReadEach, inside the socket's read callback: it must not read
	// the conn, and should not block for long (Close waits for it to
	// return). more false ends ReadEach, which returns err.
	HandleRead(b *bufpool.Buffer) (more bool, err error)
	// ReadWait returns how long a wait for bytes may last before ReadEach
	// gives up (timedOut), asked at the start and before every wait, so
	// that the bound can change while ReadEach runs; 0 waits for good.
	ReadWait() time.Duration
}

// Flusher is what FlushReadyWithin flushes from inside its wait: h2frame's
// Writer.
type Flusher interface{ Flush() error }

// Wrap returns c ready for the frame layer. Where the platform and the
// connection allow it (Linux, a conn exposing syscall.RawConn) and pooled is
// true, the result is a *Conn, which also offers ReadReady and
// ReadReadyWithin (the waits of h2conn's reader) and implements
// h2frame.VectorWriter (WriteVec). With pooled false it is a
// *VecConn (WriteVec by writev, no ReadReady). Elsewhere it is a
// *FallbackConn, adding only WriteVec. Wrapping a conn that Wrap returned
// rewraps the original conn, but for ForSniff's, which pooled reads keep
// as it is (it may be in the idle poller's set already).
func Wrap(c net.Conn, pooled bool) net.Conn {
	if _, ok := c.(tlsWrapper); ok {
		return c // SecuredTLS's, ready as it is
	}
	if sc, ok := c.(sniffed); ok && pooled {
		return sc
	}
	c = unwrap(c)
	if w := wrapRaw(c, pooled); w != nil {
		return w
	}
	fc := &FallbackConn{Conn: c}
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
		fc.vec = true
	}
	return fc
}

// PooledReadsDefault reports whether pooled reads are on by default: true
// unless the environment sets LEANGRPC_READ_BUFFER_POOLING=false (the
// rollback switch).
func PooledReadsDefault() bool {
	v, ok := os.LookupEnv("LEANGRPC_READ_BUFFER_POOLING")
	if !ok {
		return true
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

// LowWaterDefault reports whether a *Conn's ReadFull waits under a
// receive low-water mark by default (SetLowWater): true unless the
// environment sets LEANGRPC_RCVLOWAT to 0 or false (the rollback switch).
func LowWaterDefault() bool {
	v, ok := os.LookupEnv("LEANGRPC_RCVLOWAT")
	if !ok {
		return true
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

// FallbackConn is what Wrap returns for conns it cannot drive through a
// descriptor: it adds WriteVec to the conn and nothing else.
type FallbackConn struct {
	net.Conn
	// vec says that the conn takes net.Buffers in one writev (TCP and
	// Unix conns); others (TLS, pipes, a dialer's own conns) get each
	// slice as a Write of its own, so WriteVec joins slices for them.
	vec bool
	// bufs is the net.Buffers handed to WriteTo, reused across calls so that
	// WriteVec does not allocate; borrowed from the caller's bufs, valid while
	// WriteVec runs.
	bufs  net.Buffers
	store [][]byte // backing array of bufs, cleared after each call
}

// WriteVec writes all of bufs (it borrows them until return) with
// net.Buffers.WriteTo: one writev where the conn supports it, sequential
// writes otherwise. It returns the number of bytes written and the first
// error. The caller serialises calls to WriteVec.
func (c *FallbackConn) WriteVec(bufs [][]byte) (int64, error) {
	if !c.vec && len(bufs) > 1 {
		return c.writeJoined(bufs)
	}
	c.store = append(c.store[:0], bufs...)
	c.bufs = c.store
	n, err := c.bufs.WriteTo(c.Conn)
	clear(c.store)
	c.bufs = nil
	return n, err
}

// joinedWrite is the most bytes writeJoined gathers for one Write: a TLS
// record's plaintext. crypto/tls seals a record, and writes it to the
// socket, for every Write (and every 16 KiB of one), so a batch of frames
// passed slice by slice took a record and a system call per slice: for a
// large message, one for each 9-byte frame header.
const joinedWrite = 16 << 10

// writeJoined is WriteVec for a conn without writev: small slices are
// copied together into writes of up to joinedWrite bytes, and what is left
// of a large slice once such a write is full goes out as it is, without a
// copy. It borrows bufs until return; the scratch it copies into comes from
// the pool for the call's length, so an idle conn holds none.
func (c *FallbackConn) writeJoined(bufs [][]byte) (int64, error) {
	sb := bufpool.Default().Get(joinedWrite)
	acc := sb.Bytes()[:0]
	var n int64
	var err error
	for _, p := range bufs {
		if len(acc) == 0 && len(p) >= joinedWrite {
			n, err = c.write(n, p)
			if err != nil {
				break
			}
			continue
		}
		for len(p) > 0 && err == nil {
			k := min(len(p), joinedWrite-len(acc))
			acc, p = append(acc, p[:k]...), p[k:]
			if len(acc) < joinedWrite {
				break // p is all in acc
			}
			if n, err = c.write(n, acc); err == nil && len(p) >= joinedWrite {
				n, err = c.write(n, p)
				p = nil
			}
			acc = acc[:0]
		}
		if err != nil {
			break
		}
	}
	if err == nil && len(acc) > 0 {
		n, err = c.write(n, acc)
	}
	sb.Free() // the scratch; nothing refers to it once the writes returned
	return n, err
}

// write writes p and returns n plus the bytes written.
func (c *FallbackConn) write(n int64, p []byte) (int64, error) {
	m, err := c.Conn.Write(p)
	return n + int64(m), err
}

// NetConn returns the wrapped conn.
func (c *FallbackConn) NetConn() net.Conn { return c.Conn }

// sniffed is implemented by ForSniff's conns (*Conn) only.
type sniffed interface {
	net.Conn
	Peek(p []byte) (int, error)
}

// tlsWrapper is implemented by SecuredTLS's conns only.
type tlsWrapper interface{ sockioTLS() }

// wrapper is implemented by this package's wrappers only.
type wrapper interface {
	NetConn() net.Conn
	sockioWrapper()
}

func (*FallbackConn) sockioWrapper() {}

// unwrap returns the conn underneath one of this package's wrappers.
func unwrap(c net.Conn) net.Conn {
	for {
		w, ok := c.(wrapper)
		if !ok {
			return c
		}
		c = w.NetConn()
	}
}

// SetNoDelay sets TCP_NODELAY on c, or on the TCP conn under one of this
// package's wrappers. It does nothing for other conns.
func SetNoDelay(c net.Conn, on bool) error {
	if tc, ok := unwrap(c).(*net.TCPConn); ok {
		return tc.SetNoDelay(on)
	}
	return nil
}
