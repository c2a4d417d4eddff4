package grpcwire

import (
	"context"
	"sync"
	"time"
)

// CallContext is the cancelable part of a server call's context, embedded
// in its ServerStream so that a call costs no context allocation: its Done
// channel is made only when asked for, and a deadline costs one timer. It
// ends with context.Canceled when the stream is reset or finished, and with
// context.DeadlineExceeded when the request's grpc-timeout passes. Value
// asks the parent; an embedder that answers more keys wraps it (see
// ServerStream.SetContext).
//
// It implements the AfterFunc method the context package looks for, so
// that contexts derived from it register a callback instead of starting a
// goroutine each.
type CallContext struct {
	parent   context.Context
	deadline time.Time // zero without a grpc-timeout
	// onDeadline runs once c ended with DeadlineExceeded, whichever way:
	// its own timer, or a parent whose deadline came first.
	onDeadline func()

	mu     sync.Mutex    // guards the fields below
	err    error         // set once, when the call's context ends
	done   chan struct{} // made on the first Done call; closed when err is set
	funcs  []afterFunc   // AfterFunc callbacks not yet run or stopped
	nextID uint64
	timer  *time.Timer // the deadline's; nil without one
	// stopParent removes the registration on a parent that can end; nil
	// without one.
	stopParent func() bool
}

type afterFunc struct {
	id uint64
	f  func()
}

// init sets up c for a call under parent, with a deadline when hasDL.
// onDeadline runs after c ended with DeadlineExceeded (on the goroutine
// that ended it: the timer's, or the parent's watcher). It reports false when the deadline had already passed
// (a timeout of zero or less, or a parent past its deadline): c has then
// ended with DeadlineExceeded, synchronously, and onDeadline does not run.
func (c *CallContext) init(parent context.Context, timeout time.Duration, hasDL bool, onDeadline func()) bool {
	c.parent = parent
	if hasDL {
		c.deadline, c.onDeadline = time.Now().Add(timeout), onDeadline
		if pd, ok := parent.Deadline(); ok && pd.Before(c.deadline) {
			c.deadline = pd
		}
		d := time.Until(c.deadline)
		if timeout <= 0 || d <= 0 {
			c.err = context.DeadlineExceeded // c is not shared yet
			return false
		}
		c.mu.Lock() // the timer may fire before it is stored
		c.timer = time.AfterFunc(d, func() { c.cancel(context.DeadlineExceeded) })
		c.mu.Unlock()
	}
	if parent.Done() != nil {
		// Not the case of the server's connection contexts, which never
		// end themselves; a parent that can end costs a registration,
		// removed when c ends.
		stop := context.AfterFunc(parent, func() { c.cancel(parent.Err()) })
		c.mu.Lock()
		if c.err == nil {
			c.stopParent = stop
			stop = nil
		}
		c.mu.Unlock()
		if stop != nil {
			stop() // c ended meanwhile
		}
	}
	return true
}

// Deadline returns the request's deadline, if it had a grpc-timeout.
func (c *CallContext) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

// Done returns a channel closed when the call's context ends.
func (c *CallContext) Done() <-chan struct{} {
	c.mu.Lock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	d := c.done
	c.mu.Unlock()
	return d
}

// Err returns nil until the call's context ends, then why it ended.
func (c *CallContext) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	return err
}

// Value returns the parent's value for key.
func (c *CallContext) Value(key any) any { return c.parent.Value(key) }

// String names the context for debugging.
func (c *CallContext) String() string { return "grpcwire.CallContext" }

// AfterFunc arranges for f to run on its own goroutine once the context
// ends (at once if it has); stop unregisters f and reports whether it did
// so before f was started. It is what context.AfterFunc and the derived
// contexts of the context package use when the parent provides it.
func (c *CallContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.nextID++
	id := c.nextID
	c.funcs = append(c.funcs, afterFunc{id: id, f: f})
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := range c.funcs {
			if c.funcs[i].id == id {
				n := len(c.funcs)
				copy(c.funcs[i:], c.funcs[i+1:])
				c.funcs[n-1] = afterFunc{} // drop the reference
				c.funcs = c.funcs[:n-1]
				return true
			}
		}
		return false
	}
}

// cancel ends the context with err unless it has ended; it reports whether
// this call ended it.
func (c *CallContext) cancel(err error) bool {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	funcs := c.funcs
	c.funcs = nil
	t := c.timer
	stop := c.stopParent
	c.stopParent = nil
	c.mu.Unlock()
	if t != nil {
		t.Stop() // false when it is what ended c
	}
	if stop != nil {
		stop() // false when the parent's end is what ended c
	}
	for _, a := range funcs {
		go a.f()
	}
	if err == context.DeadlineExceeded && c.onDeadline != nil {
		c.onDeadline()
	}
	return true
}
