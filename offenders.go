package leangrpc

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// The repeat-offender table: a server remembers the addresses whose
// connections it ended for abuse (GOAWAY ENHANCE_YOUR_CALM: reset floods,
// HPACK bombs, header blocks past the budget, stalls inside a frame,
// control-frame floods) and serves new connections from such an address at
// a bounded rate, closing the rest as they are accepted.
//
// Why: every abuse is bounded per connection, but an attacker that
// reconnects at once makes the server pay a connection's setup and the
// abuse's allowance again, thousands of times a second; that, not any one
// connection, is what costs a core. Closing an accepted socket costs a
// fraction of serving it. A connection already up is never touched, so a
// legitimate client sharing the address (behind a proxy or a NAT) keeps
// its calls and only waits longer to reconnect while the abuse lasts. The
// table's figures are in limits.go.
// offender is what the table keeps of one address.
type offender struct {
	offenses int
	last     time.Time     // the last offense
	interval time.Duration // between served connections
	next     time.Time     // the earliest the next connection is served
}

// offenders is a server's repeat-offender table; the zero value is off.
type offenders struct {
	maxInterval time.Duration // 0: off

	mu sync.Mutex
	m  map[netip.Prefix]*offender
}

// offenderKey is the table's key for a remote address: the IPv4 address,
// or the IPv6 /64 prefix, since one host commonly holds a whole /64. ok is
// false for addresses without an IP (Unix sockets, pipes).
func offenderKey(a net.Addr) (netip.Prefix, bool) {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip = a.AddrPort().Addr()
	case *net.UDPAddr:
		ip = a.AddrPort().Addr()
	default:
		return netip.Prefix{}, false
	}
	ip = ip.Unmap()
	if !ip.IsValid() {
		return netip.Prefix{}, false
	}
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, err := ip.Prefix(bits)
	return p, err == nil
}

// admit reports whether a connection from a accepted at now is served.
func (t *offenders) admit(a net.Addr, now time.Time) bool {
	if t.maxInterval <= 0 {
		return true
	}
	key, ok := offenderKey(a)
	if !ok {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.m[key]
	if o == nil {
		return true
	}
	if now.Sub(o.last) > offenderMemory {
		delete(t.m, key)
		return true
	}
	if now.Before(o.next) {
		return false
	}
	o.next = now.Add(o.interval)
	return true
}

// offended records that a connection from a was ended for abuse at now.
func (t *offenders) offended(a net.Addr, now time.Time) {
	if t.maxInterval <= 0 {
		return
	}
	key, ok := offenderKey(a)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.m[key]
	if o == nil {
		if t.m == nil {
			t.m = make(map[netip.Prefix]*offender)
		}
		if len(t.m) >= maxOffenders {
			t.evictLocked(now)
		}
		o = &offender{}
		t.m[key] = o
	}
	o.offenses++
	o.last = now
	o.interval = offenderBaseInterval << min(o.offenses-1, 30)
	if o.interval <= 0 || o.interval > t.maxInterval {
		o.interval = t.maxInterval
	}
	if n := now.Add(o.interval); n.After(o.next) {
		o.next = n
	}
}

// evictLocked makes room in a full table: the entries past their memory
// go, or, if none has, one arbitrary entry.
func (t *offenders) evictLocked(now time.Time) {
	for k, o := range t.m {
		if now.Sub(o.last) > offenderMemory {
			delete(t.m, k)
		}
	}
	if len(t.m) < maxOffenders {
		return
	}
	for k := range t.m {
		delete(t.m, k)
		return
	}
}

// abusive reports whether a connection that ended with err was ended by the
// engine for the peer's abuse.
func abusive(err error) bool {
	var e *h2conn.Error
	return errors.As(err, &e) && e.Initiator == h2conn.InitiatorEngine &&
		e.StreamID == 0 && e.Code == h2frame.ErrCodeEnhanceYourCalm
}
