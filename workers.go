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
	// sweep retires the workers idle for idleTimeout; armed while any
	// worker is idle. One timer for the pool rather than one per worker:
	// re-arming a worker's own timer and selecting on it beside its
	// channel, after every call, cost about a tenth of the server's CPU
	// per unary call under many concurrent calls.
	sweep      *time.Timer
	sweepArmed bool
}

// worker is one handler goroutine of a pool.
type worker struct {
	// calls hands the worker its next call, or nil to exit. The pool
	// sends only to a worker it has taken off idle, at most once before
	// the worker receives, so a buffer of one never blocks the sender.
	calls     chan *rpc
	idleSince time.Time // when it last went idle; guarded by the pool's mu
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
		w.idleSince = time.Now()
		p.idle = append(p.idle, w)
		if !p.sweepArmed {
			p.armSweepLocked(p.idleTimeout)
		}
		p.mu.Unlock()

		if r = <-w.calls; r == nil { // retired, or the pool stopped
			return
		}
	}
}

// armSweepLocked arms the sweep to run after d.
func (p *workerPool) armSweepLocked(d time.Duration) {
	p.sweepArmed = true
	if p.sweep == nil {
		p.sweep = time.AfterFunc(d, p.retireIdle)
		return
	}
	p.sweep.Reset(d)
}

// retireIdle is the sweep: it makes the workers idle for idleTimeout exit,
// and arms itself again for the next one to reach it while any is idle.
// The idle list is in the order the workers went idle (run takes from its
// end), so those to retire are at its start.
func (p *workerPool) retireIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepArmed = false
	if p.stopped {
		return
	}
	now := time.Now()
	k := 0
	for k < len(p.idle) && now.Sub(p.idle[k].idleSince) >= p.idleTimeout {
		p.idle[k].calls <- nil // off the list, so nobody else sends to it
		k++
	}
	if k > 0 {
		n := copy(p.idle, p.idle[k:])
		clear(p.idle[n:])
		p.idle = p.idle[:n]
		p.n -= k
	}
	if len(p.idle) > 0 {
		p.armSweepLocked(p.idle[0].idleSince.Add(p.idleTimeout).Sub(now))
	}
}

// stop makes the idle workers exit now and the others when their calls
// end; calls run afterwards get goroutines of their own.
func (p *workerPool) stop() {
	p.mu.Lock()
	p.stopped = true
	idle := p.idle
	p.idle = nil
	p.n -= len(idle)
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweepArmed = false
	}
	p.mu.Unlock()
	for _, w := range idle {
		w.calls <- nil
	}
}
