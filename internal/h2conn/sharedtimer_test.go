package h2conn

import (
	"sync"
	"testing"
	"time"
)

// Shared timers fire in deadline order, each once; Reset moves a deadline
// either way and Stop unschedules, with AfterFunc's return values.
func TestSharedTimer(t *testing.T) {
	var mu sync.Mutex
	var order []int
	fired := make(chan int, 16)
	mk := func(i int, d time.Duration) *sharedTimer {
		return afterFuncShared(d, timerFunc(func() {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			fired <- i
		}), false)
	}
	t3 := mk(3, 90*time.Millisecond)
	t1 := mk(1, time.Hour) // moved earlier below
	t2 := mk(2, 60*time.Millisecond)
	t4 := mk(4, 30*time.Millisecond) // stopped below
	t5 := mk(5, time.Millisecond)    // moved later below
	if !t1.Reset(30 * time.Millisecond) {
		t.Fatal("Reset of a scheduled timer reported it unscheduled")
	}
	if !t4.Stop() || t4.Stop() {
		t.Fatal("Stop: want true, then false")
	}
	if !t5.Reset(120 * time.Millisecond) {
		t.Fatal("Reset of a scheduled timer reported it unscheduled")
	}
	for range 4 {
		select {
		case <-fired:
		case <-time.After(5 * time.Second):
			t.Fatalf("fired so far: %v", order)
		}
	}
	mu.Lock()
	got := append([]int(nil), order...)
	mu.Unlock()
	if len(got) != 4 || got[0] != 1 || got[1] != 2 || got[2] != 3 || got[3] != 5 {
		t.Fatalf("fired %v, want [1 2 3 5]", got)
	}
	if t3.Stop() {
		t.Fatal("Stop of an expired timer reported it scheduled")
	}
	// An expired timer can be reset and fires again.
	if t2.Reset(time.Millisecond) {
		t.Fatal("Reset of an expired timer reported it scheduled")
	}
	select {
	case i := <-fired:
		if i != 2 {
			t.Fatalf("fired %d, want 2", i)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reset timer did not fire")
	}
	select {
	case i := <-fired:
		t.Fatalf("timer %d fired again", i)
	case <-time.After(50 * time.Millisecond):
	}
	timerHeap.mu.Lock()
	n := len(timerHeap.h)
	timerHeap.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d timers left in the heap", n)
	}
}

// Many timers reset and stopped from several goroutines keep the heap
// consistent (run with -race).
func TestSharedTimerConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	var fires sync.Map
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := make([]*sharedTimer, 50)
			for i := range ts {
				var tm *sharedTimer
				tm = afterFuncShared(time.Hour+time.Duration(i%7)*time.Millisecond, timerFunc(func() { fires.Store(tm, true) }), false)
				ts[i] = tm
			}
			for i, tm := range ts {
				if i%3 == 0 {
					tm.Stop()
				} else {
					tm.Reset(time.Duration(i%5) * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		timerHeap.mu.Lock()
		n := len(timerHeap.h)
		ok := true
		for i, tm := range timerHeap.h {
			if int(tm.idx) != i || (i > 0 && timerHeap.h[(i-1)/2].when > tm.when) {
				ok = false
			}
		}
		timerHeap.mu.Unlock()
		if !ok {
			t.Fatal("heap order or indexes broken")
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d timers never fired", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	count := 0
	fires.Range(func(k, v any) bool { count++; return true })
	if want := 4 * (50 - 17); count != want { // i%3 == 0 stopped: 17 of 50
		t.Fatalf("%d timers fired, want %d", count, want)
	}
}

// timerFunc runs a func as a timerOwner.
type timerFunc func()

func (f timerFunc) timerExpired() { f() }
