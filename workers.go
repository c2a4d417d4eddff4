package leangrpc

import (
	"runtime"
	"sync"
	"time"
)

// Handler workers: a server runs its calls' handlers on goroutines it keeps
// for reuse rather than on a new goroutine per call. A new goroutine starts
// on the runtime's smallest stack and a handler's decode and encode grow it
// by copying, once per call; a worker keeps the stack it grew, so under load
// the copies stop (about a quarter of the server's CPU per unary call:
// PERFORMANCE.md, "servers under h2load" and "handler workers").
//
// The pool starts workers on demand, up to a bound, and takes the most
// recently idle one first, so that the warm ones serve and the rest time
// out. A call that finds no idle worker and the bound reached runs on a new
// goroutine of its own, as every call did before: a blocking handler never
// holds up another call. Workers exit after workerIdleTimeout without a
// call and at once when the server stops, so an idle or stopped server
// keeps none.

// workerIdleTimeout is how long a worker waits for its next call before it
// exits. Under load a worker rarely waits more than a few microseconds;
// a second is long enough to keep the workers through pauses in the
// traffic and short enough that an idle server soon holds no goroutine.
const workerIdleTimeout = time.Second

// workersPerProc is the default bound on a server's workers per
// GOMAXPROCS, with minWorkers the least bound: enough workers for the
// calls in flight of a few busy connections (a load of 2 connections with
// 50 streams each keeps up to 100 handlers running at once), while a
// burst of many more calls does not leave as many grown stacks behind.
const (
	workersPerProc = 64
	minWorkers     = 128
)

// workerPool is a server's set of handler workers.
type workerPool struct {
	max         int           // the most workers at once
	idleTimeout time.Duration // workerIdleTimeout; tests shorten or lengthen it

	mu      sync.Mutex // guards the fields below
	idle    []*worker  // waiting for a call, the most recently idle last
	n       int        // workers running, idle or not
	stopped bool
}

// worker is one handler goroutine of a pool.
type worker struct {
	// calls hands the worker its next call, or nil to exit. The pool
	// sends only to a worker it has taken off idle, at most once before
	// the worker receives, so a buffer of one never blocks the sender.
	calls chan *rpc
	timer *time.Timer // the idle timeout, armed while idle
}

// newWorkerPool returns a pool of at most bound workers, or of the default
// bound for 0.
func newWorkerPool(bound int) *workerPool {
	if bound <= 0 {
		bound = max(workersPerProc*runtime.GOMAXPROCS(0), minWorkers)
	}
	return &workerPool{max: bound, idleTimeout: workerIdleTimeout}
}

// run runs the call's handler on an idle worker, on a new worker, or when
// neither is to be had on a goroutine of its own.
func (p *workerPool) run(r *rpc) {
	p.mu.Lock()
	if k := len(p.idle) - 1; k >= 0 {
		w := p.idle[k]
		p.idle[k] = nil
		p.idle = p.idle[:k]
		p.mu.Unlock()
		w.calls <- r
		return
	}
	if p.stopped || p.n >= p.max {
		p.mu.Unlock()
		go r.handle()
		return
	}
	p.n++
	p.mu.Unlock()
	go p.work(r)
}

// work is a worker's goroutine: it runs its first call, then the calls it
// is handed while it is idle, until it times out idle or the pool stops.
func (p *workerPool) work(r *rpc) {
	w := &worker{calls: make(chan *rpc, 1)}
	for {
		r.handle()
		r = nil // the rpc belongs to its call only

		p.mu.Lock()
		if p.stopped {
			p.n--
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()

		if w.timer == nil {
			w.timer = time.NewTimer(p.idleTimeout)
		} else {
			w.timer.Reset(p.idleTimeout)
		}
		select {
		case r = <-w.calls:
		case <-w.timer.C:
			if p.retire(w) {
				return
			}
			// A call was handed to it as the timeout fired.
			r = <-w.calls
		}
		if r == nil { // the pool stopped
			w.timer.Stop()
			return
		}
	}
}

// retire takes an idle worker whose timeout fired out of the pool, and
// reports whether it did: false if the worker is no longer idle, because
// run took it for a call or stop for its exit, either of which is in its
// channel or about to be.
func (p *workerPool) retire(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.idle {
		if x == w {
			last := len(p.idle) - 1
			copy(p.idle[i:], p.idle[i+1:])
			p.idle[last] = nil
			p.idle = p.idle[:last]
			p.n--
			return true
		}
	}
	return false
}

// stop makes the idle workers exit now and the others when their calls
// end; calls run afterwards get goroutines of their own.
func (p *workerPool) stop() {
	p.mu.Lock()
	p.stopped = true
	idle := p.idle
	p.idle = nil
	p.n -= len(idle)
	p.mu.Unlock()
	for _, w := range idle {
		w.calls <- nil
	}
}
