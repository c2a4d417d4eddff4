//go:build linux && !leangrpcportable

package sockio

import (
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// Idle connections without a goroutine.
//
// A goroutine parked in the poller keeps its stack: 4 KiB or more once the
// frame layer's calls have grown it, and Go shrinks a stack only while less
// than a quarter of it is in use, which a goroutine parked under a read
// loop never is. So that an idle connection holds no goroutine at all, its
// reader can hand the wait to the process-wide idle poller (OnReadable) and
// return; the poller starts a fresh goroutine when bytes arrive.
//
// The idle poller is one goroutine on an epoll instance of its own, with
// each waiting socket registered one-shot (EPOLLONESHOT, level-triggered,
// so bytes that arrived before the registration fire at once). The epoll
// descriptor itself waits in the Go runtime's poller, so no thread blocks.

// idlePoller is the process-wide poller behind OnReadable.
type idlePoller struct {
	once sync.Once
	err  error // from starting; sticky
	epfd int
	file *os.File        // keeps epfd open and in the runtime's poller
	rc   syscall.RawConn // of file
	fn   func(fd uintptr) bool

	mu sync.Mutex
	// broken is the error that ended the poller's wait, after which it
	// takes no more waits and epfd is closed; guarded by mu.
	broken error
	// waiting maps a socket descriptor to the conn waiting on it (nil:
	// none), indexed by descriptor: descriptors are small and dense, so a
	// slice costs a waiting conn 8 bytes where a map costs several times
	// that; guarded by mu.
	waiting []*Conn
	gen     uint32 // registration counter, tells a stale event from a new wait; guarded by mu

	// owned by the poller goroutine
	events [64]syscall.EpollEvent
	n      int
	fns    []func()
}

var idle idlePoller

// start creates the epoll instance and the poller goroutine once.
func (p *idlePoller) start() error {
	p.once.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			p.err = os.NewSyscallError("epoll_create1", err)
			return
		}
		if err := syscall.SetNonblock(fd, true); err != nil {
			syscall.Close(fd)
			p.err = os.NewSyscallError("setnonblock", err)
			return
		}
		p.file = os.NewFile(uintptr(fd), "sockio-idle-epoll")
		rc, err := p.file.SyscallConn()
		if err != nil {
			p.file.Close()
			p.err = err
			return
		}
		p.epfd, p.rc = fd, rc
		p.fn = p.harvest
		go p.loop()
	})
	return p.err
}

// loop waits for events and starts the callback of each conn whose socket
// became readable (or failed, or hung up).
func (p *idlePoller) loop() {
	for {
		if err := p.rc.Read(p.fn); err != nil {
			p.fail(err)
			return
		}
		p.mu.Lock()
		for _, ev := range p.events[:p.n] {
			var c *Conn
			if ev.Fd >= 0 && int(ev.Fd) < len(p.waiting) {
				c = p.waiting[ev.Fd]
			}
			if c == nil || c.pollGen != uint32(ev.Pad) {
				continue // its wait ended by Close, or a stale event
			}
			p.waiting[ev.Fd] = nil
			p.fns = append(p.fns, c.onReady)
			c.onReady = nil
		}
		p.mu.Unlock()
		for i, fn := range p.fns {
			go fn()
			p.fns[i] = nil
		}
		p.fns = p.fns[:0]
	}
}

// fail ends the poller after its wait failed, which nothing in the
// process should cause (the epoll descriptor is never closed otherwise).
// A library must not take its user's process down for that: every
// waiting conn's callback runs, so that its reader reads again, and
// OnReadable fails from now on, so that readers wait for bytes themselves
// (a parked goroutine per idle connection, as on the portable path). It
// logs once.
func (p *idlePoller) fail(err error) {
	p.mu.Lock()
	p.broken = fmt.Errorf("sockio: idle poller failed: %w", err)
	for fd, c := range p.waiting {
		if c != nil {
			p.fns = append(p.fns, c.onReady)
			c.onReady = nil
			p.waiting[fd] = nil
		}
	}
	p.file.Close() // no OnReadable or Close uses epfd once broken is set
	p.mu.Unlock()
	log.Printf("leangrpc: %v; idle connections keep a reader goroutine from now on", p.broken)
	for i, fn := range p.fns {
		go fn()
		p.fns[i] = nil
	}
	p.fns = p.fns[:0]
}

// harvest is the RawConn.Read callback of the epoll descriptor: it collects
// ready events without blocking, or returns false to park until there are
// some.
func (p *idlePoller) harvest(fd uintptr) bool {
	for {
		n, err := syscall.EpollWait(int(fd), p.events[:], 0)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return false // EAGAIN-like: wait for the next edge
		case n == 0:
			return false
		}
		p.n = n
		return true
	}
}

// OnReadable arranges for fn to run once, on a new goroutine, when the
// socket has bytes to read, has failed or was hung up, or when the conn is
// closed through Close; meanwhile no goroutine waits for it. Bytes already
// queued fire at once. It is meant for a reader that found nothing to read
// (TryReadReady returned no buffer) and returns after arming it: the
// goroutine fn starts is the new reader. The conn must be closed through its
// Close, not the wrapped conn's, for fn to run on close. One wait at a
// time: the caller must not call OnReadable again before fn runs, nor read
// meanwhile.
func (c *Conn) OnReadable(fn func()) error {
	if err := c.lowerMarkOutside(); err != nil {
		return opError(c.Conn, "read", err)
	}
	p := &idle
	if err := p.start(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.closed {
		return opError(c.Conn, "read", net.ErrClosed)
	}
	if p.broken != nil {
		return p.broken
	}
	p.gen++
	ev := syscall.EpollEvent{
		Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
		Fd:     c.fd,
		Pad:    int32(p.gen),
	}
	op := syscall.EPOLL_CTL_MOD // re-arm the one-shot registration
	if !c.inEpoll {
		op = syscall.EPOLL_CTL_ADD
	}
	if err := syscall.EpollCtl(p.epfd, op, int(c.fd), &ev); err != nil {
		return opError(c.Conn, "read", os.NewSyscallError("epoll_ctl", err))
	}
	c.inEpoll, c.pollGen, c.onReady = true, p.gen, fn
	if int(c.fd) >= len(p.waiting) {
		p.waiting = append(p.waiting, make([]*Conn, int(c.fd)+1-len(p.waiting))...)
	}
	p.waiting[c.fd] = c
	return nil
}

// AwaitsReadable reports whether a callback armed with OnReadable waits to
// run: the conn's reader handed the socket to the idle poller. For tests
// that check what an idle connection holds, once its reader is gone.
func (c *Conn) AwaitsReadable() bool {
	idle.mu.Lock()
	defer idle.mu.Unlock()
	return c.onReady != nil
}

// Close closes the conn. A callback armed with OnReadable runs (on a new
// goroutine), so that the reader finds the conn closed.
func (c *Conn) Close() error {
	p := &idle
	var fn func()
	p.mu.Lock()
	if c.onReady != nil {
		fn, c.onReady = c.onReady, nil
		if p.waiting[c.fd] == c {
			p.waiting[c.fd] = nil
		}
	}
	if c.inEpoll && !c.closed && p.broken == nil {
		// Leave the epoll set before the descriptor number can be
		// reused, and only while the descriptor is still this conn's:
		// when the wrapped conn was closed behind its back (a listener
		// wrapper's Close), the registration went with the descriptor,
		// and the number may already be another conn's, whose
		// registration and slot must stay. Control fails on a closed
		// conn.
		c.w.rc.Control(func(fd uintptr) {
			syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
		})
	}
	c.closed = true
	p.mu.Unlock()
	err := c.Conn.Close()
	if fn != nil {
		go fn()
	}
	return err
}

// TryReadReady is ReadReady without the wait: when no byte is there it
// returns a nil buffer and a nil error at once, holding nothing. Otherwise it
// returns as ReadReady does.
func (c *Conn) TryReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	if err := c.disarm(); err != nil {
		return nil, opError(c.Conn, "read", err)
	}
	return c.readReady(pool, size, 0, true)
}

// ReadReadyWithin is ReadReady that waits a bounded time for bytes: when
// none came by then it returns a nil buffer and a nil error, holding
// nothing, so that the caller can hand the wait to OnReadable. The bound is
// the conn's read deadline, armed at the first wait to now+d and left armed
// when bytes come, so a busy connection pays for one timer per d/2 rather
// than two per wait: a wait therefore gives up after between d/2 and d. It
// is cleared on a timeout or error and by ReadReady, TryReadReady and Read,
// so the caller must not use read deadlines of its own.
func (c *Conn) ReadReadyWithin(pool *bufpool.Pool, size int, d time.Duration) (*bufpool.Buffer, error) {
	b, _, err := c.FlushReadyWithin(pool, size, d, nil)
	return b, err
}

// FlushReadyWithin is ReadReadyWithin that flushes f from inside the wait,
// for a caller that writes a request and then waits for its answer. The
// wait begins (RawConn.Read clears the readiness flag) before f's bytes
// leave, so the answer's readiness edge comes after it and the wait parks
// without the read that ReadReady makes first, which after a write mostly
// finds the socket empty. Bytes that came before the wait began, and
// whose edge the wait cleared, are read with the answer. It returns f's
// error as ferr (with no buffer and no read), otherwise what
// ReadReadyWithin returns. With f nil it is ReadReadyWithin.
func (c *Conn) FlushReadyWithin(pool *bufpool.Pool, size int, d time.Duration, f Flusher) (b *bufpool.Buffer, ferr, err error) {
	if c.rdl != 0 {
		// Re-arm a deadline too close to bound this wait (or, after a
		// larger d, too far), before the read can trip over it.
		now := monoNow()
		if left := c.rdl - now; left < int64(d/2) || left > int64(d) {
			if err := c.arm(now, d); err != nil {
				if f != nil {
					ferr = f.Flush()
				}
				return nil, ferr, opError(c.Conn, "read", err)
			}
		}
	}
	b, ferr, err = c.flushReady(pool, size, d, false, f)
	if err != nil && c.rdl != 0 {
		timedOut := errors.Is(err, os.ErrDeadlineExceeded)
		if derr := c.disarm(); derr != nil && timedOut {
			return nil, ferr, opError(c.Conn, "read", derr)
		}
		if timedOut {
			return nil, ferr, nil
		}
	}
	return b, ferr, err
}

// StartIdlePoller starts the process-wide goroutine behind OnReadable now
// rather than at the first OnReadable; goroutine leak checks call it before
// taking their baseline. It returns the error that prevents idle waits, if
// any.
func StartIdlePoller() error { return idle.start() }
