package h2conn

import (
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// Client keepalive: a server that never answers PINGs is detected.
func TestClientKeepaliveTimeout(t *testing.T) {
	g := runtime.NumGoroutine()
	pool := bufpool.New(nil)
	cn, sn := net.Pipe()
	// The fake server reads and discards everything, answering nothing.
	go io.Copy(io.Discard, sn)
	c, err := NewClientConn(cn, Config{Pool: pool, KeepaliveTime: 20 * time.Millisecond,
		KeepaliveTimeout: 30 * time.Millisecond, KeepalivePermitWithoutStream: true, SettingsTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("keepalive did not close a dead connection")
	}
	var e *Error
	if !errors.As(c.Err(), &e) || e.Reason != "keepalive_timeout" {
		t.Fatalf("Err = %v", c.Err())
	}
	sn.Close()
	checkLeaks(t, pool, g)
}

// Keepalive against a real server whose policy forbids such pings: GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings" after more than two strikes.
func TestKeepaliveTooManyPings(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newPair(t, Config{KeepaliveTime: 5 * time.Millisecond, KeepalivePermitWithoutStream: true},
		Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	select {
	case <-p.client.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server tolerated aggressive pings")
	}
	var e *Error
	if !errors.As(p.client.Err(), &e) || e.Code != h2frame.ErrCodeEnhanceYourCalm || !strings.Contains(e.Reason, "too_many_pings") {
		t.Fatalf("client Err = %v", p.client.Err())
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

func TestPingPolicy(t *testing.T) {
	c := &Conn{role: RoleServer, cfg: &Config{PingMinTime: time.Minute}}
	t0 := time.Unix(1000, 0)
	// The first ping is free; three more within MinTime: third strike ends it.
	if c.pingPolicyLocked(t0) != nil {
		t.Fatal("first ping struck")
	}
	c.numPeer = 1
	for i := 1; i <= 2; i++ {
		if err := c.pingPolicyLocked(t0.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatalf("strike %d ended the connection", i)
		}
	}
	if err := c.pingPolicyLocked(t0.Add(3 * time.Second)); err == nil || err.Code != h2frame.ErrCodeEnhanceYourCalm || err.Reason != "too_many_pings" {
		t.Fatalf("third strike: %v", err)
	}
	// Sending data forgives.
	c.pingStrikes, c.resetStrikes = 2, true
	if c.pingPolicyLocked(t0.Add(4*time.Second)) != nil || c.pingStrikes != 0 {
		t.Fatal("strikes not reset by sent data")
	}
	// Polite pings never strike.
	for i := 1; i <= 5; i++ {
		if c.pingPolicyLocked(t0.Add(4*time.Second+time.Duration(i)*time.Minute)) != nil {
			t.Fatal("polite ping struck")
		}
	}
	// Without streams and not permitted: two hours apply.
	c.numPeer = 0
	base := t0.Add(time.Hour)
	c.lastPingAt = base.UnixNano()
	for i := 1; i <= 3; i++ {
		c.pingPolicyLocked(base.Add(time.Duration(i) * 10 * time.Minute))
	}
	if c.pingStrikes != 3 {
		t.Fatalf("strikes without streams = %d, want 3", c.pingStrikes)
	}
}
