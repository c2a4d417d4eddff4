//go:build linux && !leangrpcportable

package sockio

import (
	"io"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// maxIovecs is the most iovecs one writev takes (Linux UIO_MAXIOV); longer
// lists go out over several calls.
const maxIovecs = 1024

// defaultReadSize is the read size ReadReady uses when asked for a
// non-positive one: a full default frame plus its header.
const defaultReadSize = 16<<10 + 9

// wrapRaw returns a *Conn or *VecConn for conns with a socket descriptor, or
// nil when c has none.
func wrapRaw(c net.Conn, pooled bool) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	fd, ok := socketFD(rc)
	if !ok {
		return nil
	}
	if !pooled {
		v := &VecConn{Conn: c}
		v.w.init(rc)
		return v
	}
	p := &Conn{VecConn: VecConn{Conn: c}, fd: int32(fd)}
	p.w.init(rc)
	return p
}

// socketFD returns rc's descriptor if it is a socket (a *os.File exposes
// syscall.Conn too, and its RawConn.Read does not wait in the poller for
// regular files).
func socketFD(rc syscall.RawConn) (int, bool) {
	var serr error
	sfd := -1
	err := rc.Control(func(fd uintptr) {
		_, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TYPE)
		sfd = int(fd)
	})
	return sfd, err == nil && serr == nil
}

// VecConn is a conn with a socket descriptor whose WriteVec issues writev
// directly. Wrap returns it on Linux when pooled reads are off.
type VecConn struct {
	net.Conn
	w rawWriter
}

// WriteVec writes all of bufs (it borrows them until return) with as few
// writev calls as the socket allows, parking in the poller while the send
// buffer is full. It returns the bytes written and the first error, wrapped
// as net.Buffers.WriteTo wraps it (a *net.OpError, op "writev"). It does not
// allocate once its iovec array has grown to the longest list seen. The
// caller serialises calls to WriteVec; Write may run concurrently (the
// descriptor's write lock orders them).
func (c *VecConn) WriteVec(bufs [][]byte) (int64, error) {
	n, err := c.w.writeVec(bufs)
	if err != nil {
		err = opError(c.Conn, "writev", err)
	}
	return n, err
}

// Write writes all of p (borrowed until return) as WriteVec writes one
// slice: with send(2) rather than write(2), which on a socket takes the
// file layer's detour (position lock, permission hooks, fsnotify) for
// nothing (PERFORMANCE.md, "The single call from 16.5 to 14.7 µs"). Errors
// are wrapped as net's conns wrap them (a *net.OpError, op "write").
func (c *VecConn) Write(p []byte) (int, error) {
	n, err := c.w.write(p)
	if err != nil {
		err = opError(c.Conn, "write", err)
	}
	return n, err
}

// NetConn returns the wrapped conn.
func (c *VecConn) NetConn() net.Conn { return c.Conn }

func (*VecConn) sockioWrapper() {}

// rawWriter drives writev through a RawConn. The state of a call lives in
// a writeCall taken from writeCalls for its length, so that an idle conn
// holds none of it. Its fields are owned by the goroutine inside WriteVec
// (the caller serialises calls).
type rawWriter struct {
	rc syscall.RawConn
}

// writeParks counts the writes that found a send buffer full and parked in
// the poller, process-wide; tests read it to check the partial-write path
// ran.
var writeParks atomic.Int64

// writeCall is the state of one WriteVec.
type writeCall struct {
	fn   func(fd uintptr) bool // w.writeOnce, bound once per writeCall so a call allocates nothing
	w    *rawWriter            // the writer of the call in progress
	iov  []syscall.Iovec       // reused; entries point into bufs only during a call
	bufs [][]byte              // borrowed from the caller, valid while WriteVec runs
	idx  int                   // first slice of bufs not fully written
	off  int                   // bytes of bufs[idx] already written
	n    int64                 // bytes written in this call
	err  error                 // syscall error of this call
	hi   int                   // most iovecs used in this call, for clearing
	one  [1][]byte             // bufs of a Write
}

// writeCalls holds the writeCalls of conns not inside WriteVec.
var writeCalls = sync.Pool{New: func() any {
	w := new(writeCall)
	w.fn = w.writeOnce
	return w
}}

func (w *rawWriter) init(rc syscall.RawConn) { w.rc = rc }

func (rw *rawWriter) writeVec(bufs [][]byte) (int64, error) {
	w := writeCalls.Get().(*writeCall)
	n, err := w.run(rw, bufs)
	writeCalls.Put(w)
	return n, err
}

// write is writeVec for one slice.
func (rw *rawWriter) write(p []byte) (int, error) {
	w := writeCalls.Get().(*writeCall)
	w.one[0] = p
	n, err := w.run(rw, w.one[:])
	w.one[0] = nil
	writeCalls.Put(w)
	return int(n), err
}

// run writes all of bufs through rw's RawConn with w as the call's state,
// and drops w's references to them after.
func (w *writeCall) run(rw *rawWriter, bufs [][]byte) (int64, error) {
	w.w, w.bufs, w.idx, w.off, w.n, w.err, w.hi = rw, bufs, 0, 0, 0, nil, 0
	raceReleaseIO()
	err := rw.rc.Write(w.fn)
	if err == nil {
		err = w.err
	} else {
		err = rawOpErr(err)
	}
	n := w.n
	clear(w.iov[:w.hi]) // do not pin the caller's buffers
	w.w, w.bufs, w.err = nil, nil, nil
	return n, err
}

// writeOnce is the RawConn.Write callback: it writes until everything is out
// (true), the socket would block (false: the runtime parks the goroutine
// until the socket is writable and calls again), or an error (true, w.err).
func (w *writeCall) writeOnce(fd uintptr) bool {
	for {
		iov := w.iov[:0]
		for i := w.idx; i < len(w.bufs) && len(iov) < maxIovecs; i++ {
			b := w.bufs[i]
			if i == w.idx {
				b = b[w.off:]
			}
			if len(b) == 0 {
				continue
			}
			v := syscall.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
		if len(iov) == 0 {
			return true
		}
		w.iov = iov
		w.hi = max(w.hi, len(iov))
		var r uintptr
		var e syscall.Errno
		op := "writev"
		if len(iov) == 1 {
			// One slice: send(2), which skips the file layer that
			// writev(2) goes through (see Write).
			op = "sendto"
			r, e = sendSome(fd, iov[0].Base, int(iov[0].Len))
		} else {
			r, _, e = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		}
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			writeParks.Add(1)
			return false
		case e != 0:
			w.err = os.NewSyscallError(op, e)
			return true
		case r == 0:
			w.err = io.ErrUnexpectedEOF
			return true
		}
		w.n += int64(r)
		w.advance(int(r))
	}
}

// advance moves idx/off past n written bytes.
func (w *writeCall) advance(n int) {
	for n > 0 && w.idx < len(w.bufs) {
		rem := len(w.bufs[w.idx]) - w.off
		if n < rem {
			w.off += n
			return
		}
		n -= rem
		w.idx++
		w.off = 0
	}
	for w.idx < len(w.bufs) && w.off == len(w.bufs[w.idx]) {
		w.idx++
		w.off = 0
	}
}

// Conn is a conn with a socket descriptor that reads into pool buffers only
// once bytes are there. Wrap returns it on Linux when pooled reads are on.
// It offers h2conn's reader its waits (ReadReady, ReadReadyWithin) and
// implements h2frame.VectorWriter.
type Conn struct {
	VecConn // VecConn.w.rc is the conn's RawConn

	// rdl is the read deadline ReadReadyWithin left armed (monoNow
	// nanoseconds, 0: none), kept across calls so that a busy connection
	// does not set and clear a timer per wait; owned by the reading
	// goroutine.
	rdl int64

	// The OnReadable registration (idle_linux.go); guarded by idle.mu.
	closed  bool // Close ran
	inEpoll bool // the socket is in the idle poller's epoll set

	// lowWater says whether ReadFull may set a receive low-water mark
	// (lowwater_linux.go); placed here so that the Conn stays within 64
	// bytes. Set before the first read.
	lowWater bool

	pollGen uint32 // the registration's number; guarded by idle.mu
	// fd is the socket's descriptor, recorded by Wrap for OnReadable and
	// Close, which use it only while closed is false (the descriptor is
	// open until Close closes the wrapped conn).
	fd int32
	// mark is the low-water mark ReadFull left on the socket (0 or 1:
	// the kernel's default); owned by the reading goroutine.
	mark    int32
	onReady func() // the armed callback, or nil; guarded by idle.mu
}

// readCall is the state of one ReadReady, taken from readCalls for its
// length so that an idle conn holds none of it; owned by the goroutine
// inside ReadReady (the caller serialises calls).
type readCall struct {
	fn     func(fd uintptr) bool // r.readOnce, bound once per readCall so ReadReady allocates nothing
	c      *Conn                 // the conn of the call in progress
	pool   *bufpool.Pool
	buf    *bufpool.Buffer // the result, handed to the caller
	err    error
	size   int
	within time.Duration // ReadReadyWithin's bound; 0: none
	try    bool          // TryReadReady: return on EAGAIN instead of parking
	flush  Flusher       // FlushReadyWithin: flushed by the first callback, which then parks without reading
	ferr   error         // the flush's error
}

// readCalls holds the readCalls of conns not inside ReadReady.
var readCalls = sync.Pool{New: func() any {
	r := new(readCall)
	r.fn = r.readOnce
	return r
}}

// ReadReady blocks until the socket is readable while holding no buffer,
// then reads up to size bytes (16 KiB+9 when size <= 0) into a buffer taken
// from pool (bufpool.Default() when nil) at that moment. It returns an owned
// buffer whose Len is the number of bytes read (at least one), or nil and an
// error: io.EOF once the peer closed its side, errors wrapped as the conn's
// Read wraps them otherwise (errors.Is(err, os.ErrDeadlineExceeded) after the
// read deadline, errors.Is(err, net.ErrClosed) after Close). The caller
// serialises calls to ReadReady; it must not run alongside Read.
func (c *Conn) ReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	if err := c.disarm(); err != nil {
		return nil, opError(c.Conn, "read", err)
	}
	return c.readReady(pool, size, 0, false)
}

// readReady is ReadReady without disarm, with ReadReadyWithin's bound and
// TryReadReady's switch.
func (c *Conn) readReady(pool *bufpool.Pool, size int, within time.Duration, try bool) (*bufpool.Buffer, error) {
	b, _, err := c.flushReady(pool, size, within, try, nil)
	return b, err
}

// flushReady is readReady that flushes f first (FlushReadyWithin), and
// returns f's error apart.
func (c *Conn) flushReady(pool *bufpool.Pool, size int, within time.Duration, try bool, f Flusher) (*bufpool.Buffer, error, error) {
	if pool == nil {
		pool = bufpool.Default()
	}
	if size <= 0 || size > math.MaxInt32 {
		size = defaultReadSize
	}
	r := readCalls.Get().(*readCall)
	r.c, r.pool, r.size, r.buf, r.err, r.within, r.try, r.flush = c, pool, size, nil, nil, within, try, f
	err := c.w.rc.Read(r.fn)
	if r.flush != nil {
		// The wait failed before its first callback (a closed socket):
		// the bytes still go out, or fail on their own.
		r.ferr = r.flush.Flush()
	}
	b, ferr := r.buf, r.ferr
	if err == nil {
		err = r.err
	} else {
		err = rawOpErr(err)
	}
	r.c, r.pool, r.buf, r.err, r.flush, r.ferr = nil, nil, nil, nil, nil, nil
	readCalls.Put(r)
	if ferr != nil {
		if b != nil {
			b.Free()
		}
		return nil, ferr, nil
	}
	if err != nil { // readOnce set r.err, or parked and left no buffer
		if err == io.EOF {
			return nil, nil, io.EOF
		}
		if _, ok := err.(*net.OpError); !ok {
			err = opError(c.Conn, "read", err)
		}
		return nil, nil, err
	}
	return b, nil, nil
}

// readOnce is the RawConn.Read callback. It takes a buffer, reads without
// blocking, and on EAGAIN frees the buffer and returns false, so that the
// runtime parks the goroutine in the poller holding nothing and calls again
// once the socket is readable. syscall.Read rather than x/sys/unix.Read:
// its race-detector annotations pair with the ones net's writes make.
//
// After a short read the socket is most likely empty, and this first read
// will mostly find EAGAIN (one read syscall in two on a lone unary call).
// Parking first instead (returning false before reading) is not safe:
// RawConn.Read resets the descriptor's read readiness before its first
// callback, and the poller is edge-triggered, so bytes that arrived between
// the short read and this call would have left their only readiness edge in
// the flag the reset clears, and the goroutine would sleep until the peer
// sends more, possibly never (a unary call waiting for its one response).
// The non-blocking read after the reset is what makes the wait safe.
func (r *readCall) readOnce(fd uintptr) bool {
	if f := r.flush; f != nil {
		// FlushReadyWithin: the wait has begun, so the answer to these
		// bytes will leave its readiness edge for it; park without
		// reading.
		r.flush = nil
		if r.ferr = f.Flush(); r.ferr != nil {
			return true
		}
		return r.parkWithin(fd, false)
	}
	b, err := readPooled(fd, r.pool, r.size)
	if err != nil {
		if err != syscall.EAGAIN {
			r.err = err
			return true
		}
		return r.parkWithin(fd, r.try) // TryReadReady: done, with no buffer
	}
	r.buf = b // ownership passes to ReadReady's caller
	return true
}

// parkWithin is readOnce's return before a wait: it lowers a mark ReadFull
// left (lowerMark), and for ReadReadyWithin it bounds the wait, arming the
// deadline only when there is a wait and none is armed. It returns done,
// or true when lowering or arming failed (r.err).
func (r *readCall) parkWithin(fd uintptr, done bool) bool {
	if err := r.c.lowerMark(fd); err != nil {
		r.err = err
		return true
	}
	if c := r.c; r.within > 0 && c.rdl == 0 {
		if err := c.arm(monoNow(), r.within); err != nil {
			r.err = err
			return true
		}
	}
	return done
}

// readPooled makes one readSome into a buffer from pool of length size,
// returned with the bytes read as its length and owned by the caller. On
// an error (syscall.EAGAIN included) the buffer is freed: a reader that
// parks holds no memory.
func readPooled(fd uintptr, pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	b := pool.Get(size)
	n, err := readSome(fd, b.Bytes())
	if err != nil {
		b.Free()
		return nil, err
	}
	b.SetLen(n)
	return b, nil
}

// maxRawLen is the largest send or receive made without telling the
// runtime that the goroutine enters a system call. The socket is
// non-blocking, so the call returns as soon as the kernel has copied what
// it can; for up to 64 KiB that is a few microseconds, less than the
// runtime's own bookkeeping around a system call costs in total: handing
// the P over for the call's duration and taking it back, and waking
// another thread when the monitor retakes the P meanwhile (PERFORMANCE.md,
// "The single call from 16.5 to 14.7 µs"). Larger copies tell the runtime,
// so that the garbage collector's stop-the-world does not wait on them.
const maxRawLen = 64 << 10

// sockCall makes the system call trap (sendto or recvfrom, with no
// address) on fd for n bytes at p, raw up to maxRawLen. The trap numbers
// are x/sys's: the syscall package has none on linux/386, where it goes
// through socketcall(2); the direct calls exist there since Linux 4.3.
func sockCall(trap, fd uintptr, p unsafe.Pointer, n int, flags uintptr) (uintptr, syscall.Errno) {
	if n <= maxRawLen {
		r, _, e := syscall.RawSyscall6(trap, fd, uintptr(p), uintptr(n), flags, 0, 0)
		return r, e
	}
	r, _, e := syscall.Syscall6(trap, fd, uintptr(p), uintptr(n), flags, 0, 0)
	return r, e
}

// sendSome makes one non-blocking send(2) of n bytes at p, without
// SIGPIPE.
func sendSome(fd uintptr, p *byte, n int) (uintptr, syscall.Errno) {
	return sockCall(unix.SYS_SENDTO, fd, unsafe.Pointer(p), n, syscall.MSG_NOSIGNAL)
}

// recvSome makes one non-blocking recv(2) into p.
func recvSome(fd uintptr, p []byte) (uintptr, syscall.Errno) {
	if raceBuild {
		// syscall.Read tells the race detector that what the peer
		// wrote before sending (raceReleaseIO) happens before.
		n, err := syscall.Read(int(fd), p)
		if err != nil {
			e, ok := err.(syscall.Errno)
			if !ok {
				e = syscall.EIO
			}
			return 0, e
		}
		return uintptr(n), 0
	}
	return sockCall(unix.SYS_RECVFROM, fd, unsafe.Pointer(&p[0]), len(p), 0)
}

// readSome makes one non-blocking recv(2) into p, retried on EINTR: n > 0
// bytes, or syscall.EAGAIN when the socket is empty, io.EOF at the peer's
// end, or the error. recv rather than read(2), which on a socket takes
// the file layer's detour (see Write).
func readSome(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, io.ErrShortBuffer // the callers' sizes are positive
	}
	for {
		r, e := recvSome(fd, p)
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return 0, syscall.EAGAIN
		case e != 0:
			return 0, os.NewSyscallError("recvfrom", e)
		case r == 0:
			return 0, io.EOF
		}
		return int(r), nil
	}
}

// Read reads from the wrapped conn, after clearing a read deadline that
// ReadReadyWithin left armed. The caller must not run it alongside
// ReadReady.
func (c *Conn) Read(p []byte) (int, error) {
	if err := c.disarm(); err != nil {
		return 0, opError(c.Conn, "read", err)
	}
	if err := c.lowerMarkOutside(); err != nil {
		return 0, opError(c.Conn, "read", err)
	}
	return c.Conn.Read(p)
}

// monoBase is the origin of monoNow.
var monoBase = time.Now()

// monoNow returns the monotonic clock in nanoseconds since monoBase: one
// clock read, where time.Now makes two (wall and monotonic); a wait's
// bound is checked against rdl on every wait of a busy connection.
func monoNow() int64 { return int64(time.Since(monoBase)) }

// arm sets the read deadline ReadReadyWithin waits under to d from now
// (now is monoNow's).
func (c *Conn) arm(now int64, d time.Duration) error {
	c.rdl = now + int64(d)
	if err := c.Conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		c.rdl = 0
		return err
	}
	return nil
}

// disarm clears the read deadline ReadReadyWithin left armed, if any, so
// that reads without a bound never see it.
func (c *Conn) disarm() error {
	if c.rdl == 0 {
		return nil
	}
	c.rdl = 0
	return c.Conn.SetReadDeadline(time.Time{})
}

// NetConn returns the wrapped conn.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// opError wraps err as net's conns wrap I/O errors.
func opError(c net.Conn, op string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return err
	}
	la, ra := c.LocalAddr(), c.RemoteAddr()
	var network string
	if la != nil {
		network = la.Network()
	}
	return &net.OpError{Op: op, Net: network, Source: la, Addr: ra, Err: err}
}

// rawOpErr renames the "raw-read"/"raw-write" op of an error from RawConn to
// the op the conn's own Read or net.Buffers.WriteTo would report.
func rawOpErr(err error) error {
	if oe, ok := err.(*net.OpError); ok {
		switch oe.Op {
		case "raw-read":
			oe.Op = "read"
		case "raw-write":
			oe.Op = "writev"
		}
	}
	return err
}
