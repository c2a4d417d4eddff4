//go:build linux && !leangrpcportable

package sockio

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReadFull: the rest of a frame in one wake-up.
//
// When the frame layer knows how many bytes it needs next (the rest of a
// large DATA frame, whose length its header gave), a reader that takes
// whatever the socket holds wakes once per arriving burst: on loopback a
// 256 KiB frame comes in several, and each wake-up costs a read that
// finds the socket empty, a park and a goroutine switch. ReadFull waits
// instead under a receive low-water mark (SO_RCVLOWAT) of the bytes still
// missing, less lowWaterEarly, so that the kernel wakes the reader once
// they are (nearly) all there.
//
// The mark never reaches past the frame being read. Those bytes are the
// only ones the peer can send next: nothing (a PING, a RST_STREAM, a
// GOAWAY) can overtake them on the stream, so waiting for all of them is
// what the reader does anyway, and a mark that asked for more would wait
// for bytes a peer may legally hold back (one that sends part of a message
// and waits for a PING's answer before it sends the rest). The peer's
// close or reset wakes a wait under any mark.
//
// The mark stays on the socket after ReadFull (the next large frame
// usually sets one again at once) and is lowered to 1 before any other
// wait parks (lowerMark): the waits for a frame header, ReadEach, Read and
// OnReadable must see the first byte.
//
// A read that comes back short has drained the socket, but the wait after
// it still begins with a read that finds it empty (EAGAIN): the peer's end
// may be queued behind the bytes the short read returned, and shows only
// in the next read. TCP_INQ, which reports after each read the bytes left
// and counts a received FIN as one, would tell a drained socket from one
// holding a FIN, but not from one whose connection was reset: a reset
// whose edge woke the wait before that read would be lost to a park
// without the EAGAIN read, and the wait would last for good
// (TestReadFullPeerEnds). So ReadFull reads until EAGAIN, as Read does.
//
// Setting a mark never narrows the receive window: Linux grows a receive
// buffer smaller than twice the mark, and the window clamp, to fit it, and
// leaves a buffer sized with SO_RCVBUF alone, capping the mark at half of
// it instead (TestReadFullMarkKeepsWindow).
//
// The mark saves a wake-up only where the reader waits inside a frame. A
// sender's write of a whole frame usually lands in the socket in one go,
// so a busy reader finds the frame complete and sets no mark at all: in
// streaming benchmarks with both ends on one loaded machine it is set for
// a few large frames in a hundred, and on and off measure alike.
//
// The mark needs Linux 4.18 or later: before, a mark above what the
// receive buffer could hold was not capped and the wait hung. Older
// kernels get no mark.

// lowWaterMin is the least number of missing bytes worth a mark: below it
// the wake-ups saved cost less than the setsockopt. It is at least twice
// lowWaterEarly.
const lowWaterMin = 32 << 10

// lowWaterEarly is how much less than the missing bytes a mark asks for,
// so that the reader wakes while the last of them are still arriving and
// its reads overlap with them.
const lowWaterEarly = 16 << 10

// lowWaterMax caps a mark; the kernel caps it again at half the receive
// buffer's limit (tcp_rmem[2], or SO_RCVBUF when the user set it).
const lowWaterMax = 4 << 20

// lowWaterWaits counts ReadFull's parks, and lowWaterSets its setsockopt
// calls that raised a mark, process-wide: tests read them to see the
// wake-ups a frame costs.
var lowWaterWaits, lowWaterSets atomic.Int64

// readFullCall is the state of one ReadFull, taken from readFullCalls for
// its length; owned by the goroutine inside ReadFull.
type readFullCall struct {
	fn func(fd uintptr) bool // f.readOnce, bound once per readFullCall
	c  *Conn
	p  []byte // borrowed from the caller while ReadFull runs
	// progress is ReadFull's: called each time some bytes came.
	progress func()
	got      int
	err      error
}

var readFullCalls = sync.Pool{New: func() any {
	f := new(readFullCall)
	f.fn = f.readOnce
	return f
}}

// SetLowWater turns ReadFull's receive low-water mark on or off (off by
// default; h2conn turns it on as its Config says). Called before the
// connection's first read.
func (c *Conn) SetLowWater(on bool) { c.lowWater = on }

// ReadFull reads exactly len(p) bytes into p (borrowed until return),
// waiting for the socket in the poller, under a receive low-water mark of
// the bytes still missing when SetLowWater turned it on (see above). It
// returns nil, or io.EOF when the peer's end came before any byte,
// io.ErrUnexpectedEOF after some, or errors wrapped as Read wraps them;
// what it read before an error is lost, as the caller fails the
// connection then. It does not allocate. The caller serialises ReadFull
// with the other reads.
//
// progress, when not nil, is called each time some of the bytes came but
// not all: a watch over a peer stalled inside a frame then sees a large
// frame arriving slowly making progress.
func (c *Conn) ReadFull(p []byte, progress func()) error {
	if len(p) == 0 {
		return nil
	}
	if err := c.disarm(); err != nil {
		return opError(c.Conn, "read", err)
	}
	f := readFullCalls.Get().(*readFullCall)
	f.c, f.p, f.got, f.err, f.progress = c, p, 0, nil, progress
	rerr := c.w.rc.Read(f.fn)
	err, got := f.err, f.got
	f.c, f.p, f.err, f.progress = nil, nil, nil, nil
	readFullCalls.Put(f)
	if err == nil && rerr != nil {
		err = rawOpErr(rerr)
	}
	switch {
	case err == nil:
		return nil
	case err == io.EOF && got > 0:
		return io.ErrUnexpectedEOF
	case err == io.EOF:
		return io.EOF
	}
	if _, ok := err.(*net.OpError); ok {
		return err // RawConn.Read's, renamed by rawOpErr
	}
	return opError(c.Conn, "read", err)
}

// readOnce is ReadFull's RawConn.Read callback: it reads until p is full
// (true), an error (true, f.err), or the socket is empty (false: the
// runtime parks the goroutine until it is readable, under the mark).
func (f *readFullCall) readOnce(fd uintptr) bool {
	for {
		n, err := readSome(fd, f.p[f.got:])
		if err == syscall.EAGAIN {
			return f.park(fd)
		}
		if err != nil {
			f.err = err
			return true
		}
		if f.got += n; f.got == len(f.p) {
			return true
		}
		if f.progress != nil {
			f.progress()
		}
	}
}

// park readies the wait that follows a false return: a mark of the bytes
// still missing, when they are worth one.
func (f *readFullCall) park(fd uintptr) bool {
	c := f.c
	lowWaterWaits.Add(1)
	want := int32(1)
	if c.lowWater && lowWaterKernel() {
		if miss := len(f.p) - f.got; miss >= lowWaterMin {
			want = int32(min(miss-lowWaterEarly, lowWaterMax))
		}
	}
	if want != c.mark && (want > 1 || c.mark > 1) {
		if err := setMark(fd, want); err != nil {
			f.err = err
			return true
		}
		if want > 1 {
			lowWaterSets.Add(1)
		}
		c.mark = want
	}
	return false
}

// lowWaterKernel reports whether the kernel caps a mark (Linux 4.18 and
// later; see above), asked once.
var lowWaterKernel = sync.OnceValue(func() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 4, 18)
})

// kernelAtLeast reports whether a kernel release string ("6.8.0-45-generic")
// is major.minor or later.
func kernelAtLeast(release string, major, minor int) bool {
	var v [2]int
	i := 0
	for _, r := range release {
		switch {
		case r >= '0' && r <= '9':
			v[i] = v[i]*10 + int(r-'0')
		case r == '.' && i == 0:
			i = 1
		default:
			return v[0] > major || v[0] == major && v[1] >= minor
		}
	}
	return v[0] > major || v[0] == major && v[1] >= minor
}

// setMark sets the socket's receive low-water mark.
func setMark(fd uintptr, v int32) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, int(v))
}

// lowerMark lowers a mark ReadFull left on the socket to 1, before a wait
// that must see the first byte; fd is the socket's. It reports the
// setsockopt's error. The kernel signals readiness at once when bytes are
// already queued, so that a wait that follows cannot miss them.
func (c *Conn) lowerMark(fd uintptr) error {
	if c.mark <= 1 {
		return nil
	}
	c.mark = 1
	return setMark(fd, 1)
}

// lowerMarkOutside is lowerMark for callers without the descriptor at
// hand (Read, OnReadable). On a closed conn it does nothing: what the
// caller does next reports the close.
func (c *Conn) lowerMarkOutside() error {
	if c.mark <= 1 {
		return nil
	}
	var serr error
	if c.w.rc.Control(func(fd uintptr) { serr = c.lowerMark(fd) }) != nil {
		return nil
	}
	return serr
}
