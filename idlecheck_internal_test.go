package leangrpc

import (
	"testing"
	"time"
)

// The heap of idle checks keeps each ClientConn's index right through
// schedules, reschedules and cancellations, and holds no entry of a
// ClientConn whose check was cancelled.
func TestIdleChecksHeap(t *testing.T) {
	ccs := make([]*ClientConn, 50)
	for i := range ccs {
		ccs[i] = &ClientConn{}
		ccs[i].mu.Lock()
		ccs[i].scheduleIdleCheckLocked(time.Hour + time.Duration((i*37)%50)*time.Minute)
		ccs[i].mu.Unlock()
	}
	check := func() {
		t.Helper()
		idleChecks.mu.Lock()
		defer idleChecks.mu.Unlock()
		for i, e := range idleChecks.h {
			if int(e.cc.idleIdx) != i+1 {
				t.Fatalf("entry %d has idleIdx %d", i, e.cc.idleIdx)
			}
			if p := (i - 1) / 2; i > 0 && idleChecks.h[p].when > e.when {
				t.Fatalf("entry %d is due before its parent", i)
			}
		}
	}
	check()
	for i, cc := range ccs {
		cc.mu.Lock()
		if i%3 == 0 {
			cc.cancelIdleCheckLocked()
		} else {
			cc.scheduleIdleCheckLocked(2*time.Hour - time.Duration(i)*time.Minute)
		}
		cc.mu.Unlock()
		check()
	}
	for i, cc := range ccs {
		if scheduled := cc.idleIdx > 0; scheduled != (i%3 != 0) || cc.idleChecking != scheduled {
			t.Errorf("ClientConn %d: idleIdx %d, idleChecking %v", i, cc.idleIdx, cc.idleChecking)
		}
		cc.mu.Lock()
		cc.cancelIdleCheckLocked()
		cc.mu.Unlock()
	}
	check()
}
