package leangrpc

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestSerializerOrder: callbacks run one at a time in the order they were
// queued; one queued by a running callback runs after it, not inside it.
func TestSerializerOrder(t *testing.T) {
	var s serializer
	var got []int
	s.schedule(func() {
		got = append(got, 1)
		s.schedule(func() { got = append(got, 3) })
		got = append(got, 2)
	})
	if want := []int{1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
}

// TestSerializerOneAtATime: callbacks scheduled from many goroutines
// never overlap, and run waits for its own.
func TestSerializerOneAtATime(t *testing.T) {
	var s serializer
	var running, overlaps, ran int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				ok := s.run(func() {
					mu.Lock()
					running++
					if running > 1 {
						overlaps++
					}
					mu.Unlock()
					time.Sleep(time.Microsecond)
					mu.Lock()
					running--
					ran++
					mu.Unlock()
				})
				if !ok {
					t.Error("run reported its callback dropped on an open serializer")
				}
			}
		}()
	}
	wg.Wait()
	if overlaps != 0 || ran != 800 {
		t.Fatalf("%d overlaps, %d callbacks ran; want 0 and 800", overlaps, ran)
	}
}

// TestSerializerClose: close drops what is queued, releases a run waiting
// for a dropped callback, and refuses later callbacks.
func TestSerializerClose(t *testing.T) {
	var s serializer
	release := make(chan struct{})
	started := make(chan struct{})
	go s.schedule(func() { close(started); <-release })
	<-started
	result := make(chan bool, 1)
	go func() { result <- s.run(func() { t.Error("a dropped callback ran") }) }()
	// Wait until the run's callback is queued behind the blocked one.
	for {
		s.mu.Lock()
		n := len(s.queue)
		s.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.close()
	if ok := <-result; ok {
		t.Fatal("run reported a dropped callback as run")
	}
	close(release)
	if s.schedule(func() { t.Error("a callback ran after close") }) {
		t.Fatal("schedule accepted a callback after close")
	}
}
