//go:build linux && !leangrpcportable

package sockio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// ReadEach: one RawConn.Read for a run of reads.
//
// RawConn.Read clears the descriptor's readiness before its first callback,
// so each ReadReady has to start with a read: an edge that came before the
// clear is gone, and only a read tells whether bytes are there. After a
// read that drained the socket, that read mostly finds it empty (EAGAIN):
// one wasted system call per wait, and on a lone unary call it falls
// between a request's write and the peer reading it, on the thread that
// runs both. ReadEach stays inside one RawConn.Read and hands each read's
// bytes to the caller's ReadHandler from within the callback; after a read that
// drained the socket (it came back short) it parks without reading: an
// edge since that read left the readiness set, and nothing clears it in
// between.
//
// One thing a short read does not tell: whether the peer's FIN (or a
// reset) is queued behind the bytes it returned. Such an end came before
// the read, so no edge follows it, and a parked ReadEach sees it only when
// more bytes or the bound (ReadWait) wake it. ReadEach therefore parks without
// reading only under a bound, and a ReadHandler that sees the peer announce
// its end (HTTP/2's GOAWAY) should stop the ReadEach, so that the next read,
// outside, finds the end at once.

// readEachEmptyReads counts ReadEach's reads that found the socket empty,
// process-wide; tests read it to check that ReadEach parks without them.
var readEachEmptyReads atomic.Int64

// readEachCall is the state of one ReadEach, taken from readEachCalls for its
// length; owned by the goroutine inside ReadEach.
type readEachCall struct {
	fn       func(fd uintptr) bool // d.readOnce, bound once per readEachCall
	c        *Conn
	pool     *bufpool.Pool
	size     int
	d        ReadHandler
	err      error // from the socket
	derr     error // from the ReadHandler
	parkNext bool  // the last read came back short: wait before reading again
}

var readEachCalls = sync.Pool{New: func() any {
	d := new(readEachCall)
	d.fn = d.readOnce
	return d
}}

// ReadEach reads the socket into buffers from pool (bufpool.Default() when
// nil) of size bytes (16 KiB+9 when size <= 0), taken when bytes are there,
// and hands each to d.HandleRead until that returns more false (ReadEach
// returns its error), the socket fails (ReadEach returns the error as
// ReadReady does, io.EOF at the peer's end) or, with a bound
// (d.ReadWait() > 0), no byte came for that long: then timedOut is true,
// holding nothing, as ReadReadyWithin returns. The bound is the read
// deadline as ReadReadyWithin arms it (re-armed when a wait starts with
// less than half the bound left). Only with a bound does ReadEach park after
// a short read without reading again (see above: an end queued behind the
// bytes is then seen within the bound). The caller serialises ReadEach with
// the other reads.
func (c *Conn) ReadEach(pool *bufpool.Pool, size int, d ReadHandler) (timedOut bool, err error) {
	within := d.ReadWait()
	if within <= 0 {
		if err := c.disarm(); err != nil {
			return false, opError(c.Conn, "read", err)
		}
	} else if c.rdl != 0 {
		// A deadline left from before, too close (or too far): re-arm it
		// before RawConn.Read trips over it.
		now := monoNow()
		if left := c.rdl - now; left < int64(within/2) || left > int64(within) {
			if err := c.arm(now, within); err != nil {
				return false, opError(c.Conn, "read", err)
			}
		}
	}
	if pool == nil {
		pool = bufpool.Default()
	}
	if size <= 0 {
		size = defaultReadSize
	}
	dc := readEachCalls.Get().(*readEachCall)
	dc.c, dc.pool, dc.size, dc.d = c, pool, size, d
	rerr := c.w.rc.Read(dc.fn)
	err, derr := dc.err, dc.derr
	*dc = readEachCall{fn: dc.fn}
	readEachCalls.Put(dc)
	if derr != nil {
		return false, derr
	}
	if err == nil && rerr != nil {
		err = rawOpErr(rerr)
	}
	if err == nil {
		return false, nil
	}
	if err == io.EOF {
		return false, io.EOF
	}
	if c.rdl != 0 { // a bounded wait armed it
		timedOut = errors.Is(err, os.ErrDeadlineExceeded)
		if derr := c.disarm(); derr != nil && timedOut {
			return false, opError(c.Conn, "read", derr)
		}
		if timedOut {
			return true, nil
		}
	}
	if _, ok := err.(*net.OpError); !ok {
		err = opError(c.Conn, "read", err)
	}
	return false, err
}

// readOnce is ReadEach's RawConn.Read callback: it reads and hands the bytes
// on until the socket is empty (false: the runtime parks the goroutine and
// calls again once it is readable) or ReadEach is to end (true).
func (dc *readEachCall) readOnce(fd uintptr) bool {
	for {
		if dc.parkNext {
			dc.parkNext = false
			return dc.park(fd)
		}
		b, err := readPooled(fd, dc.pool, dc.size)
		if err != nil {
			if err != syscall.EAGAIN {
				dc.err = err
				return true
			}
			readEachEmptyReads.Add(1)
			return dc.park(fd)
		}
		short := b.Len() < dc.size
		more, derr := dc.d.HandleRead(b) // ownership of b passes to the ReadHandler
		if !more {
			dc.derr = derr
			return true
		}
		dc.parkNext = short && dc.d.ReadWait() > 0
	}
}

// park readies the wait that follows a false return: a mark ReadFull left
// is lowered (lowerMark); with a bound, the read deadline is armed (or
// re-armed, when less than half the bound is left) so that the wait gives
// up after between half the bound and the bound, as ReadWait says it now.
func (dc *readEachCall) park(fd uintptr) bool {
	if err := dc.c.lowerMark(fd); err != nil {
		dc.err = err
		return true
	}
	within := dc.d.ReadWait()
	if within <= 0 {
		return false
	}
	c := dc.c
	now := monoNow()
	if left := c.rdl - now; c.rdl == 0 || left < int64(within/2) || left > int64(within) {
		if err := c.arm(now, within); err != nil {
			dc.err = err
			return true
		}
	}
	return false
}
