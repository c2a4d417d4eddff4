package h2conn

import (
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// A connection knows whether it was made inside a synctest bubble: one made
// there gets a keepalive timer of its own, outside the shared heap, one made
// outside an entry of the heap.
func TestConnKnowsItsBubble(t *testing.T) {
	check := func(where string, want bool) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		c := newConn(a, Config{Pool: bufpool.New(nil), KeepaliveTime: time.Hour}, RoleClient, nil)
		if c.cfg.inBubble != want {
			t.Errorf("%s: inBubble %v, want %v", where, c.cfg.inBubble, want)
		}
		c.mu.Lock()
		c.startTimersLocked()
		own := c.timers.keepalive.own != nil
		c.stopTimersLocked()
		c.mu.Unlock()
		if own != want {
			t.Errorf("%s: keepalive timer of its own %v, want %v", where, own, want)
		}
	}
	check("outside a bubble", false)
	synctest.Test(t, func(t *testing.T) { check("inside a bubble", true) })
	check("outside again", false)
}
