package leangrpc

import (
	"container/heap"
	"sync"
	"time"
)

// The idle checks (connectivity.go's checkIdle) of every ClientConn out of
// IDLE are entries of one process-wide heap, ordered by when each is due,
// that one runtime timer serves. A time.AfterFunc per channel would hold a
// runtime timer and its closure for the whole idle timeout (30 minutes by
// default) of every idle channel; an entry is two words in the heap's
// slice and an index in the ClientConn. h2conn's keepalive timers work the
// same way, but each is an object of its own with an owner interface,
// where a ClientConn is its own entry.
//
// A ClientConn made inside a testing/synctest bubble gets a time.Timer of
// its own instead: a bubble's timers run on its fake clock, and a check
// run from the shared timer would run outside the bubble, where the
// bubble's channels must not be touched.

// idleChecks is the heap of scheduled idle checks.
var idleChecks struct {
	mu    sync.Mutex
	h     idleHeap      // guarded by mu
	rt    *time.Timer   // fires at armed; made by the first schedule; guarded by mu
	armed time.Duration // when rt fires (since idleEpoch), 0: not armed; guarded by mu
}

// idleEpoch is the origin of the heap's deadlines, so that they are
// monotonic durations.
var idleEpoch = time.Now().Add(-time.Second)

// idleEntry is a scheduled idle check.
type idleEntry struct {
	when time.Duration // since idleEpoch
	cc   *ClientConn
}

// scheduleIdleCheckLocked makes cc's idle check run after d, replacing
// the one scheduled, if any; cc.mu must be held.
func (cc *ClientConn) scheduleIdleCheckLocked(d time.Duration) {
	cc.idleChecking = true
	if cc.idleTimer != nil {
		cc.idleTimer.Reset(d)
		return
	}
	if inSynctestBubble() {
		cc.idleTimer = time.AfterFunc(d, cc.checkIdle)
		return
	}
	when := time.Since(idleEpoch) + d
	idleChecks.mu.Lock()
	defer idleChecks.mu.Unlock()
	if i := cc.idleIdx; i > 0 {
		idleChecks.h[i-1].when = when
		heap.Fix(&idleChecks.h, int(i-1))
	} else {
		heap.Push(&idleChecks.h, idleEntry{when: when, cc: cc})
	}
	armIdleChecksLocked()
}

// cancelIdleCheckLocked drops cc's scheduled idle check; cc.mu must be
// held.
func (cc *ClientConn) cancelIdleCheckLocked() {
	cc.idleChecking = false
	if cc.idleTimer != nil {
		cc.idleTimer.Stop()
		return
	}
	idleChecks.mu.Lock()
	defer idleChecks.mu.Unlock()
	if i := cc.idleIdx; i > 0 {
		heap.Remove(&idleChecks.h, int(i-1))
	}
	if len(idleChecks.h) == 0 && cap(idleChecks.h) > 1024 {
		idleChecks.h = nil // after a crowd of channels closed
	}
}

// armIdleChecksLocked makes the runtime timer fire at the earliest
// deadline; idleChecks.mu must be held.
func armIdleChecksLocked() {
	h := idleChecks.h
	if len(h) == 0 {
		return // a stray firing finds nothing due
	}
	first := h[0].when
	if idleChecks.armed != 0 && idleChecks.armed <= first {
		return // fires in time; it rearms for what is left
	}
	idleChecks.armed = max(first, 1)
	d := first - time.Since(idleEpoch)
	if idleChecks.rt == nil {
		idleChecks.rt = time.AfterFunc(d, runIdleChecks)
	} else {
		idleChecks.rt.Reset(d)
	}
}

// runIdleChecks runs the checks that are due, each on a goroutine of its
// own (a check that enters IDLE waits for the balancer to close), and
// rearms the runtime timer for the next.
func runIdleChecks() {
	var due []*ClientConn
	idleChecks.mu.Lock()
	now := time.Since(idleEpoch)
	for len(idleChecks.h) > 0 && idleChecks.h[0].when <= now {
		due = append(due, heap.Pop(&idleChecks.h).(idleEntry).cc)
	}
	idleChecks.armed = 0
	armIdleChecksLocked()
	idleChecks.mu.Unlock()
	for _, cc := range due {
		go cc.checkIdle()
	}
}

// idleHeap is idleChecks' heap.Interface; each ClientConn knows its
// index (plus one, so that 0 is "not scheduled"). Its methods run with
// idleChecks.mu held.
type idleHeap []idleEntry

func (h idleHeap) Len() int           { return len(h) }
func (h idleHeap) Less(i, j int) bool { return h[i].when < h[j].when }

func (h idleHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].cc.idleIdx, h[j].cc.idleIdx = int32(i+1), int32(j+1)
}

func (h *idleHeap) Push(x any) {
	e := x.(idleEntry)
	e.cc.idleIdx = int32(len(*h) + 1)
	*h = append(*h, e)
}

func (h *idleHeap) Pop() any {
	old := *h
	n := len(old) - 1
	e := old[n]
	old[n] = idleEntry{}
	*h = old[:n]
	e.cc.idleIdx = 0
	return e
}

// inSynctestBubble reports whether the calling goroutine runs inside a
// testing/synctest bubble: there time.Now carries no monotonic reading,
// while outside one it always does (h2conn's bubble.go tells more).
func inSynctestBubble() bool {
	now := time.Now()
	return now == now.Round(0)
}
