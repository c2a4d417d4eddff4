package grpcwire

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

func TestCallContext(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	var c CallContext
	c.init(parent, 0, false, nil)
	if _, ok := c.Deadline(); ok || c.Err() != nil || c.Value(ctxKey{}) != "v" {
		t.Fatalf("fresh: deadline %v err %v value %v", ok, c.Err(), c.Value(ctxKey{}))
	}
	early := c.Done()
	child, cancelChild := context.WithCancel(&c)
	defer cancelChild()
	ran := make(chan struct{})
	context.AfterFunc(&c, func() { close(ran) })
	stopped := false
	stop := c.AfterFunc(func() { stopped = true })
	if !stop() || stop() {
		t.Error("stop: want true, then false")
	}
	if !c.cancel(context.Canceled) || c.cancel(context.DeadlineExceeded) {
		t.Error("cancel: want true once")
	}
	for name, ch := range map[string]<-chan struct{}{"early Done": early, "late Done": c.Done(), "child": child.Done(), "AfterFunc": ran} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not end", name)
		}
	}
	if c.Err() != context.Canceled || !errors.Is(child.Err(), context.Canceled) || stopped {
		t.Errorf("err %v child %v stopped f ran %v", c.Err(), child.Err(), stopped)
	}
	late := make(chan struct{})
	if c.AfterFunc(func() { close(late) })() {
		t.Error("stop after the end reported true")
	}
	<-late
}

func TestCallContextDeadline(t *testing.T) {
	var c CallContext
	fired := make(chan struct{})
	c.init(context.Background(), 10*time.Millisecond, true, func() { close(fired) })
	if d, ok := c.Deadline(); !ok || time.Until(d) > 10*time.Millisecond {
		t.Errorf("deadline %v %v", d, ok)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("deadline did not end the context")
	}
	<-fired
	if c.Err() != context.DeadlineExceeded {
		t.Errorf("err %v", c.Err())
	}

	// A parent that ends ends the call; its shorter deadline wins.
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	var c2 CallContext
	c2.init(parent, 2*time.Hour, true, func() { t.Error("deadline ran after a cancel") })
	if d, _ := c2.Deadline(); time.Until(d) > time.Hour {
		t.Errorf("deadline %v past the parent's", d)
	}
	cancel()
	<-c2.Done()
	if c2.Err() != context.Canceled {
		t.Errorf("err %v", c2.Err())
	}
}

// TestCallContextExpired: a deadline already over when the call starts (a
// grpc-timeout of 0n, or a parent past its deadline) ends the context
// before init returns, without running onDeadline.
func TestCallContextExpired(t *testing.T) {
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for name, tc := range map[string]struct {
		parent  context.Context
		timeout time.Duration
	}{"0n": {context.Background(), 0}, "negative": {context.Background(), -time.Second}, "parent past": {past, time.Hour}} {
		var c CallContext
		if c.init(tc.parent, tc.timeout, true, func() { t.Errorf("%s: onDeadline ran", name) }) {
			t.Errorf("%s: init reported a live deadline", name)
		}
		if c.Err() != context.DeadlineExceeded {
			t.Errorf("%s: err %v right after init", name, c.Err())
		}
		select {
		case <-c.Done():
		default:
			t.Errorf("%s: Done not closed", name)
		}
		if _, ok := c.Deadline(); !ok {
			t.Errorf("%s: no deadline", name)
		}
	}
	var c CallContext
	if !c.init(context.Background(), time.Hour, true, nil) || c.Err() != nil {
		t.Errorf("an hour: init expired, err %v", c.Err())
	}
	c.cancel(context.Canceled)
}

// TestCallContextParentRegistration: a parent that can end holds one
// registration per live call, removed when the call ends.
func TestCallContextParentRegistration(t *testing.T) {
	var parent CallContext // its AfterFunc is what context.AfterFunc uses
	parent.init(context.Background(), 0, false, nil)
	parent.Done()
	live := func() int {
		parent.mu.Lock()
		defer parent.mu.Unlock()
		return len(parent.funcs)
	}
	calls := make([]CallContext, 3)
	for i := range calls {
		calls[i].init(&parent, 0, false, nil)
	}
	if n := live(); n != len(calls) {
		t.Fatalf("%d registrations for %d calls", n, len(calls))
	}
	for i := range calls[:2] {
		calls[i].cancel(context.Canceled)
	}
	if n := live(); n != 1 {
		t.Errorf("%d registrations after 2 of 3 calls ended, want 1", n)
	}
	// The call left still ends with its parent.
	parent.cancel(context.Canceled)
	select {
	case <-calls[2].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the parent's end did not end the call")
	}
	if calls[2].Err() != context.Canceled {
		t.Errorf("err %v", calls[2].Err())
	}
	// A call started under an ended parent ends at once, with nothing
	// registered.
	var late CallContext
	late.init(&parent, 0, false, nil)
	select {
	case <-late.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a call under an ended parent did not end")
	}
	if n := live(); n != 0 {
		t.Errorf("%d registrations after the parent ended", n)
	}
}

// A parent whose deadline comes first ends the call's context with
// DeadlineExceeded, and onDeadline runs for it as for the call's own
// deadline (the stream is then reset); it runs once.
func TestCallContextParentDeadline(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	ran := make(chan struct{}, 2)
	var c CallContext
	if !c.init(parent, time.Hour, true, func() { ran <- struct{}{} }) {
		t.Fatal("init reported an expired deadline")
	}
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("onDeadline did not run when the parent's deadline passed")
	}
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	if dl, ok := c.Deadline(); !ok || time.Until(dl) > time.Second {
		t.Fatalf("Deadline() = %v, %v; want the parent's", dl, ok)
	}
	time.Sleep(50 * time.Millisecond)
	if len(ran) != 0 {
		t.Fatal("onDeadline ran twice")
	}
}
