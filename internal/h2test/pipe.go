// Package h2test is leangrpc's test kit for the HTTP/2 layers: an in-memory
// net.Conn pair with a settable write capacity and chopped reads, a scripted
// raw-frame peer that plays either role, and leak checks for goroutines and
// pooled buffers. It is imported only by _test.go files.
//
// The peer encodes and parses frames itself, from raw bytes, so that it is an
// oracle independent of internal/h2frame; only header blocks go through an
// HPACK decoder, which tests may replace (Peer.Decoder).
//
// Everything here works inside testing/synctest bubbles when the pipe is
// created inside the bubble: every wait is a select on bubble channels and
// bubble timers.
package h2test

import (
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"
)

// Chop values for PipeConfig.ChopReads.
const (
	ChopNone   = 0  // a Read returns as much as is buffered and fits
	ChopOne    = 1  // every Read returns one byte
	ChopRandom = -1 // every Read returns a random number of bytes, at least one
)

// PipeConfig configures Pipe.
type PipeConfig struct {
	// Capacity bounds, per direction, how many written bytes may sit unread:
	// a Write blocks while the buffer holds that many. Zero means unbounded.
	// Conn.SetWriteCapacity changes it later.
	Capacity int
	// ChopReads is ChopNone, ChopRandom, or a positive maximum read size
	// (ChopOne returns one byte per Read).
	ChopReads int
	// Seed seeds ChopRandom; the same seed gives the same read sizes.
	Seed uint64
}

// Pipe returns the two ends of an in-memory, full-duplex connection. Unlike
// net.Pipe, writes are buffered (up to the capacity) so that a writer does not
// wait for the reader, as over TCP.
func Pipe(cfg PipeConfig) (a, b *Conn) {
	ab := newHalf(cfg, 1)
	ba := newHalf(cfg, 2)
	a = &Conn{r: ba, w: ab, local: pipeAddr("h2test-a"), remote: pipeAddr("h2test-b")}
	b = &Conn{r: ab, w: ba, local: pipeAddr("h2test-b"), remote: pipeAddr("h2test-a")}
	return a, b
}

// Conn is one end of a Pipe. It implements net.Conn: Read and Write honour
// deadlines with os.ErrDeadlineExceeded, Close makes the local end return
// net.ErrClosed and the remote end read io.EOF (after what is buffered) and
// fail writes with io.ErrClosedPipe.
type Conn struct {
	r, w          *half // r: bytes we read; w: bytes we write
	local, remote net.Addr
	closeOnce     sync.Once
}

// half is one direction of a pipe.
type half struct {
	mu      sync.Mutex
	buf     []byte        // written, not yet read; guarded by mu
	cap     int           // guarded by mu
	chop    int           // guarded by mu
	rng     *rand.Rand    // guarded by mu
	wclosed bool          // the writing end closed; guarded by mu
	rclosed bool          // the reading end closed; guarded by mu
	rdl     time.Time     // the reading end's read deadline; guarded by mu
	wdl     time.Time     // the writing end's write deadline; guarded by mu
	wake    chan struct{} // closed and replaced on every change; guarded by mu
	total   int64         // bytes ever written; guarded by mu
}

func newHalf(cfg PipeConfig, stream uint64) *half {
	return &half{
		cap:  cfg.Capacity,
		chop: cfg.ChopReads,
		rng:  rand.New(rand.NewPCG(cfg.Seed, stream)),
		wake: make(chan struct{}),
	}
}

// broadcast wakes every waiter; mu must be held.
func (h *half) broadcast() {
	close(h.wake)
	h.wake = make(chan struct{})
}

// wait releases mu until the next change or until dl passes; mu must be held
// and is held again on return. It reports os.ErrDeadlineExceeded when dl has
// passed.
func (h *half) wait(dl time.Time) error {
	var timeout <-chan time.Time
	if !dl.IsZero() {
		d := time.Until(dl)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	wake := h.wake
	h.mu.Unlock()
	select {
	case <-wake:
	case <-timeout:
	}
	h.mu.Lock()
	return nil
}

func deadlinePassed(dl time.Time) bool {
	return !dl.IsZero() && !time.Now().Before(dl)
}

// Read reads buffered bytes, waiting for some when there are none.
func (c *Conn) Read(p []byte) (int, error) {
	h := c.r
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		if h.rclosed {
			return 0, &net.OpError{Op: "read", Net: "pipe", Addr: c.local, Err: net.ErrClosed}
		}
		if deadlinePassed(h.rdl) {
			return 0, &net.OpError{Op: "read", Net: "pipe", Addr: c.local, Err: os.ErrDeadlineExceeded}
		}
		if len(p) == 0 {
			return 0, nil
		}
		if len(h.buf) > 0 {
			n := min(len(p), len(h.buf))
			switch {
			case h.chop == ChopRandom:
				n = 1 + h.rng.IntN(n)
			case h.chop > 0:
				n = min(n, h.chop)
			}
			copy(p, h.buf[:n])
			h.buf = h.buf[n:]
			if len(h.buf) == 0 {
				h.buf = nil // let the backing array go
			}
			h.broadcast()
			return n, nil
		}
		if h.wclosed {
			return 0, io.EOF
		}
		h.wait(h.rdl)
	}
}

// Write buffers p, waiting while the buffer is at capacity. On a deadline or
// a close it returns how much was buffered and the error.
func (c *Conn) Write(p []byte) (int, error) {
	h := c.w
	h.mu.Lock()
	defer h.mu.Unlock()
	written := 0
	for {
		if h.wclosed {
			return written, &net.OpError{Op: "write", Net: "pipe", Addr: c.local, Err: net.ErrClosed}
		}
		if h.rclosed {
			return written, &net.OpError{Op: "write", Net: "pipe", Addr: c.local, Err: io.ErrClosedPipe}
		}
		if deadlinePassed(h.wdl) {
			return written, &net.OpError{Op: "write", Net: "pipe", Addr: c.local, Err: os.ErrDeadlineExceeded}
		}
		if written == len(p) {
			return written, nil
		}
		room := len(p) - written
		if h.cap > 0 {
			room = min(room, h.cap-len(h.buf))
		}
		if room > 0 {
			h.buf = append(h.buf, p[written:written+room]...)
			h.total += int64(room)
			written += room
			h.broadcast()
			continue
		}
		h.wait(h.wdl)
	}
}

// Close closes this end. It is safe to call more than once.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.r.mu.Lock()
		c.r.rclosed = true
		c.r.buf = nil // nobody will read it
		c.r.broadcast()
		c.r.mu.Unlock()
		c.w.mu.Lock()
		c.w.wclosed = true
		c.w.broadcast()
		c.w.mu.Unlock()
	})
	if !first {
		return &net.OpError{Op: "close", Net: "pipe", Addr: c.local, Err: net.ErrClosed}
	}
	return nil
}

// CloseWrite half-closes: the remote end reads io.EOF once it has read what
// is buffered, and this end may still read.
func (c *Conn) CloseWrite() error {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	c.w.wclosed = true
	c.w.broadcast()
	return nil
}

// LocalAddr returns a fixed pipe address.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the other end's fixed pipe address.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	c.SetWriteDeadline(t)
	return nil
}

// SetReadDeadline sets the read deadline; a zero time means none.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.r.mu.Lock()
	c.r.rdl = t
	c.r.broadcast()
	c.r.mu.Unlock()
	return nil
}

// SetWriteDeadline sets the write deadline; a zero time means none.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.w.mu.Lock()
	c.w.wdl = t
	c.w.broadcast()
	c.w.mu.Unlock()
	return nil
}

// SetWriteCapacity changes how many bytes this end's writes may leave unread
// (0: unbounded). Raising it wakes a blocked writer.
func (c *Conn) SetWriteCapacity(n int) {
	c.w.mu.Lock()
	c.w.cap = n
	c.w.broadcast()
	c.w.mu.Unlock()
}

// SetReadChop changes how this end's reads are chopped (see ChopReads).
func (c *Conn) SetReadChop(chop int) {
	c.r.mu.Lock()
	c.r.chop = chop
	c.r.mu.Unlock()
}

// Unread reports how many bytes this end wrote that the other end has not
// read yet.
func (c *Conn) Unread() int {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return len(c.w.buf)
}

// Buffered reports how many bytes are waiting for this end to read them.
func (c *Conn) Buffered() int {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	return len(c.r.buf)
}

// Written reports how many bytes this end has written in total.
func (c *Conn) Written() int64 {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return c.w.total
}

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }
