package h2conn

import (
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// byteSocket is a readySocket whose reads return one byte at once.
type byteSocket struct{}

func (byteSocket) Read(p []byte) (int, error) { p[0] = 1; return 1, nil }
func (byteSocket) ReadReady(*bufpool.Pool, int) (*bufpool.Buffer, error) {
	panic("not a read inside a frame")
}
func (byteSocket) ReadReadyWithin(*bufpool.Pool, int, time.Duration) (*bufpool.Buffer, error) {
	panic("not a read inside a frame")
}

// Reads inside frames cost no timer each: the stall watch is scheduled at
// the first one and not rescheduled by those that follow, and is
// unscheduled at the connection's end.
func TestStallWatchArmsOnce(t *testing.T) {
	c := &Conn{cfg: &Config{FrameStallTimeout: time.Hour}}
	s := &readSource{sock: byteSocket{}, conn: c}
	var p [1]byte
	s.Read(p[:])
	w := s.stall
	if w == nil {
		t.Fatal("no stall watch after a read inside a frame")
	}
	when := func() time.Duration {
		timerHeap.mu.Lock()
		defer timerHeap.mu.Unlock()
		if w.timer.idx < 0 {
			return -1
		}
		return w.timer.when
	}
	first := when()
	if first < 0 {
		t.Fatal("the stall watch is not scheduled")
	}
	time.Sleep(time.Millisecond)
	for range 1000 {
		s.Read(p[:])
	}
	if got := when(); got != first {
		t.Errorf("reads inside frames rescheduled the stall watch (%v, then %v)", first, got)
	}
	if w.reads.Load() != 1001 || w.in.Load() {
		t.Errorf("reads %d, under way %v; want 1001, false", w.reads.Load(), w.in.Load())
	}
	s.close()
	if when() >= 0 {
		t.Error("the stall watch is still scheduled after close")
	}
}

// Without a bound, reads inside frames make no watch.
func TestStallWatchOff(t *testing.T) {
	s := &readSource{sock: byteSocket{}, conn: &Conn{cfg: &Config{}}}
	var p [1]byte
	s.Read(p[:])
	if s.stall != nil {
		t.Error("a stall watch without FrameStallTimeout")
	}
}
