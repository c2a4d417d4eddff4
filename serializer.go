package leangrpc

import "sync"

// serializer runs callbacks one at a time, in the order they were
// scheduled, on the goroutines that schedule them: whoever schedules while
// nothing runs runs the queue until it is empty, and a callback scheduled
// meanwhile (by another goroutine, or by a running callback) waits its
// turn in the queue. grpc-go gives every channel a goroutine for this; a
// ClientConn that keeps thousands of idle channels cheap cannot, and the
// balancer's callbacks are rare enough that running them on the goroutine
// that caused them costs nothing on the call path.
//
// A callback must not wait for another scheduled callback (it would wait
// for itself), and nobody may schedule while holding a lock a callback
// takes.
type serializer struct {
	mu      sync.Mutex
	queue   []queued
	running bool
	closed  bool
}

// queued is a scheduled callback; done, when not nil, is closed once f
// has run or has been dropped (ran tells which).
type queued struct {
	f    func()
	done chan struct{}
	ran  *bool
}

// schedule queues f, and runs the queue unless another goroutine runs it.
// After close, f is dropped and schedule reports false.
func (s *serializer) schedule(f func()) bool {
	ok := s.add(queued{f: f})
	s.drain()
	return ok
}

// enqueue queues f without running it, so that a caller holding a lock can
// fix the order of its callbacks; it runs them with drain once unlocked.
func (s *serializer) enqueue(f func()) {
	s.add(queued{f: f})
}

// run schedules f and waits until it has run; false if it was dropped
// because the serializer closed first. It must not be called from a
// callback, nor with a lock held that a callback takes.
func (s *serializer) run(f func()) bool {
	ran := false
	q := queued{f: f, done: make(chan struct{}), ran: &ran}
	if !s.add(q) {
		return false
	}
	s.drain()
	<-q.done
	return ran
}

func (s *serializer) add(q queued) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.queue = append(s.queue, q)
	return true
}

// drain runs the queue until it is empty, unless another goroutine is
// running it (then that one will).
func (s *serializer) drain() {
	if s.claim() {
		s.loop()
	}
}

// drainAsync is drain on a goroutine of its own. The methods a balancer
// calls (SubConn.Connect, Shutdown, ...) use it: the balancer may hold
// its own lock while it calls them, and the callbacks they queue take
// that lock.
func (s *serializer) drainAsync() {
	if s.claim() {
		go s.loop()
	}
}

// claim makes the caller the queue's runner, unless it is empty or
// already has one.
func (s *serializer) claim() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running || len(s.queue) == 0 {
		return false
	}
	s.running = true
	return true
}

// loop runs the queue until it is empty; running is set.
func (s *serializer) loop() {
	s.mu.Lock()
	for len(s.queue) > 0 {
		q := s.queue[0]
		s.queue[0] = queued{}
		s.queue = s.queue[1:]
		s.mu.Unlock()
		q.f()
		if q.done != nil {
			*q.ran = true
			close(q.done)
		}
		s.mu.Lock()
	}
	s.queue = nil
	s.running = false
	s.mu.Unlock()
}

// close drops what is queued and refuses what is scheduled later; a
// callback running now finishes.
func (s *serializer) close() {
	s.mu.Lock()
	s.closed = true
	dropped := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, q := range dropped {
		if q.done != nil {
			close(q.done)
		}
	}
}
