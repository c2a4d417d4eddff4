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
