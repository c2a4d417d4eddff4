package h2conn

import (
	"sync"
	"time"
)

// sharedTimer is a one-shot timer with time.AfterFunc's behaviour (f runs on
// a goroutine of its own once the timer expires), kept in a process-wide
// heap that one runtime timer serves. Every connection with keepalive holds
// one for its whole life, mostly idle: a sharedTimer costs 32 bytes where a
// time.Timer costs a runtime timer of over 100.
type sharedTimer struct {
	when time.Duration // deadline since clockEpoch; guarded by timerHeap.mu
	idx  int32         // position in timerHeap.h, -1 when not scheduled; guarded by timerHeap.mu
	f    func()        // set once by afterFuncShared
	own  *time.Timer   // the timer's own runtime timer when shareTimers is off; set once
}

// shareTimers turns the shared heap on. Tests that run connections inside
// testing/synctest bubbles turn it off: a bubble's timers must be its own.
var shareTimers = true

// timerHeap is the min-heap of scheduled sharedTimers by deadline.
var timerHeap struct {
	mu    sync.Mutex
	h     []*sharedTimer // guarded by mu
	rt    *time.Timer    // fires at armed; made by the first schedule; guarded by mu
	armed time.Duration  // when rt fires (since clockEpoch), 0: not armed; guarded by mu
}

// afterFuncShared returns a sharedTimer that runs f after d.
func afterFuncShared(d time.Duration, f func()) *sharedTimer {
	t := &sharedTimer{idx: -1, f: f}
	if !shareTimers {
		t.own = time.AfterFunc(d, f)
		return t
	}
	t.Reset(d)
	return t
}

// Reset makes the timer expire after d, whether it was scheduled or not. It
// reports whether it was scheduled.
func (t *sharedTimer) Reset(d time.Duration) bool {
	if t.own != nil {
		return t.own.Reset(d)
	}
	when := time.Since(clockEpoch) + d
	timerHeap.mu.Lock()
	defer timerHeap.mu.Unlock()
	was := t.idx >= 0
	t.when = when
	if was {
		heapFix(int(t.idx))
	} else {
		t.idx = int32(len(timerHeap.h))
		timerHeap.h = append(timerHeap.h, t)
		heapUp(int(t.idx))
	}
	armLocked()
	return was
}

// Stop unschedules the timer. It reports whether it was scheduled (false
// when it already expired or was stopped).
func (t *sharedTimer) Stop() bool {
	if t.own != nil {
		return t.own.Stop()
	}
	timerHeap.mu.Lock()
	defer timerHeap.mu.Unlock()
	if t.idx < 0 {
		return false
	}
	heapRemove(int(t.idx))
	if len(timerHeap.h) == 0 && cap(timerHeap.h) > 1024 {
		timerHeap.h = nil // after a crowd of connections left
	}
	return true
}

// armLocked makes the runtime timer fire at the earliest deadline.
func armLocked() {
	h := timerHeap.h
	if len(h) == 0 {
		return // a stray firing finds nothing due
	}
	first := h[0].when
	if timerHeap.armed != 0 && timerHeap.armed <= first {
		return // fires in time; it rearms for what is left
	}
	timerHeap.armed = max(first, 1)
	d := first - time.Since(clockEpoch)
	if timerHeap.rt == nil {
		timerHeap.rt = time.AfterFunc(d, fireShared)
	} else {
		timerHeap.rt.Reset(d)
	}
}

// fireShared runs the expired timers, each on a goroutine of its own, and
// rearms the runtime timer for the next deadline.
func fireShared() {
	var due []*sharedTimer
	timerHeap.mu.Lock()
	now := time.Since(clockEpoch)
	for len(timerHeap.h) > 0 && timerHeap.h[0].when <= now {
		t := timerHeap.h[0]
		heapRemove(0)
		due = append(due, t)
	}
	timerHeap.armed = 0
	armLocked()
	timerHeap.mu.Unlock()
	for _, t := range due {
		go t.f()
	}
}

// The heap operations; timerHeap.mu held.

func heapLess(i, j int) bool { return timerHeap.h[i].when < timerHeap.h[j].when }

func heapSwap(i, j int) {
	h := timerHeap.h
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = int32(i), int32(j)
}

func heapUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !heapLess(i, p) {
			return
		}
		heapSwap(i, p)
		i = p
	}
}

func heapDown(i int) bool {
	n, i0 := len(timerHeap.h), i
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && heapLess(r, l) {
			m = r
		}
		if !heapLess(m, i) {
			break
		}
		heapSwap(i, m)
		i = m
	}
	return i > i0
}

func heapFix(i int) {
	if !heapDown(i) {
		heapUp(i)
	}
}

func heapRemove(i int) {
	h := timerHeap.h
	last := len(h) - 1
	t := h[i]
	if i != last {
		heapSwap(i, last)
	}
	h[last] = nil
	timerHeap.h = h[:last]
	t.idx = -1
	if i != last {
		heapFix(i)
	}
}
