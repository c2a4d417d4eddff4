package h2conn

import (
	"sync"
	"testing"
	"time"
)

// connMutex excludes: many goroutines incrementing a plain counter under
// it lose no increment (and -race sees the happens-before edges), and
// none is left asleep (a lost wake-up would hang the test).
func TestConnMutexExcludes(t *testing.T) {
	var m connMutex
	var n int
	const goroutines, each = 64, 2000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m.Lock()
				n++
				if i%64 == 0 {
					time.Sleep(time.Microsecond) // hold it long enough for waiters to sleep
				}
				m.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("goroutines still waiting for the mutex after 30s: a lost wake-up")
	}
	if n != goroutines*each {
		t.Fatalf("counter %d, want %d", n, goroutines*each)
	}
	if !m.TryLock() {
		t.Fatal("TryLock failed on a free mutex")
	}
	if m.TryLock() {
		t.Fatal("TryLock succeeded on a held mutex")
	}
	m.Unlock()
}

// An uncontended connMutex makes no wake channel (idle connections do not
// pay for one); an Unlock with a waiter does.
func TestConnMutexLazyChannel(t *testing.T) {
	var m connMutex
	for range 10 {
		m.Lock()
		m.Unlock()
	}
	if m.wake.Load() != nil {
		t.Fatal("wake channel made without contention")
	}
	m.Lock()
	got := make(chan struct{})
	go func() {
		m.Lock()
		m.Unlock()
		close(got)
	}()
	for m.state.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	m.Unlock()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	if m.wake.Load() == nil {
		t.Fatal("no wake channel after a contended unlock")
	}
}

// Unlocking a free connMutex panics, as with sync.Mutex.
func TestConnMutexUnlockFree(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Unlock of a free mutex did not panic")
		}
	}()
	var m connMutex
	m.Unlock()
}
