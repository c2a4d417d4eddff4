package h2conn

import (
	"container/heap"
	"sync"
	"time"
)

// sharedTimer is a connection's keepalive timer, one-shot with
// time.AfterFunc's behaviour, kept in a process-wide heap that one runtime
// timer serves. Every connection with keepalive holds one for its whole
// life, mostly idle: a sharedTimer costs 40 bytes where a time.AfterFunc
// costs a runtime timer of over 100 and a closure.
//
// A connection made inside a testing/synctest bubble (Config.inBubble) gets
// a time.Timer of its own instead: a bubble's timers must run on its fake
// clock and belong to it, which the process-wide heap cannot do.
type sharedTimer struct {
	when  time.Duration // deadline since clockEpoch; guarded by timerHeap.mu
	idx   int32         // position in timerHeap.h, -1 when not scheduled; guarded by timerHeap.mu
	owner timerOwner    // told when the timer expires; set once
	own   *time.Timer   // the timer of its own, outside the heap; set once
}

// timerOwner is told when a sharedTimer expires, on the goroutine of the
// runtime timer that serves the heap: it must not block (Conn starts a
// goroutine of its own).
type timerOwner interface{ timerExpired() }

// timerHeap is the min-heap of scheduled sharedTimers by deadline.
var timerHeap struct {
	mu    sync.Mutex
	h     timerSlice    // guarded by mu
	rt    *time.Timer   // fires at armed; made by the first schedule; guarded by mu
	armed time.Duration // when rt fires (since clockEpoch), 0: not armed; guarded by mu
}

// afterFuncShared returns a sharedTimer that expires after d and then
// tells owner; with own set, one with a time.Timer of its own.
func afterFuncShared(d time.Duration, owner timerOwner, own bool) *sharedTimer {
	t := &sharedTimer{idx: -1, owner: owner}
	if own {
		t.own = time.AfterFunc(d, owner.timerExpired)
		return t
	}
	t.Reset(d)
	return t
}

// newSharedTimer returns a sharedTimer not yet scheduled (Reset schedules
// it), for an owner that must hold it before it can fire; with own set,
// one with a stopped time.Timer of its own.
func newSharedTimer(owner timerOwner, own bool) *sharedTimer {
	t := &sharedTimer{idx: -1, owner: owner}
	if own {
		t.own = time.AfterFunc(time.Hour, owner.timerExpired)
		t.own.Stop()
	}
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
		heap.Fix(&timerHeap.h, int(t.idx))
	} else {
		heap.Push(&timerHeap.h, t)
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
	heap.Remove(&timerHeap.h, int(t.idx))
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

// fireShared tells the owners of the expired timers, and rearms the runtime timer for the next deadline.
func fireShared() {
	var due []*sharedTimer
	timerHeap.mu.Lock()
	now := time.Since(clockEpoch)
	for len(timerHeap.h) > 0 && timerHeap.h[0].when <= now {
		due = append(due, heap.Pop(&timerHeap.h).(*sharedTimer))
	}
	timerHeap.armed = 0
	armLocked()
	timerHeap.mu.Unlock()
	for _, t := range due {
		t.owner.timerExpired()
	}
}

// timerSlice is timerHeap's heap.Interface; each timer knows its index.
// Its methods run with timerHeap.mu held.
type timerSlice []*sharedTimer

func (h timerSlice) Len() int           { return len(h) }
func (h timerSlice) Less(i, j int) bool { return h[i].when < h[j].when }

func (h timerSlice) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = int32(i), int32(j)
}

func (h *timerSlice) Push(x any) {
	t := x.(*sharedTimer)
	t.idx = int32(len(*h))
	*h = append(*h, t)
}

func (h *timerSlice) Pop() any {
	old := *h
	n := len(old) - 1
	t := old[n]
	old[n] = nil
	*h = old[:n]
	t.idx = -1
	return t
}
