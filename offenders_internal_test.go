package leangrpc

import (
	"net"
	"testing"
	"time"
)

func TestOffendersBackoff(t *testing.T) {
	tb := offenders{maxInterval: 8 * time.Millisecond}
	a := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1000}
	now := time.Unix(1000, 0)
	if !tb.admit(a, now) {
		t.Fatal("an address without offenses was refused")
	}
	// Each offense doubles the gap: 1, 2, 4, 8 ms, then stays at 8.
	for i, want := range []time.Duration{1, 2, 4, 8, 8, 8} {
		want *= time.Millisecond
		tb.offended(a, now)
		if tb.admit(a, now.Add(want-time.Microsecond)) {
			t.Fatalf("offense %d: served before its gap of %v", i+1, want)
		}
		if !tb.admit(a, now.Add(want)) {
			t.Fatalf("offense %d: refused after its gap of %v", i+1, want)
		}
		if tb.admit(a, now.Add(want+time.Microsecond)) {
			t.Fatalf("offense %d: a second connection served within the gap", i+1)
		}
		now = now.Add(want)
	}
	// Another port of the same host is the same offender; another host
	// is not.
	b := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 2000}
	if tb.admit(b, now) {
		t.Error("another port of the offending host was served within the gap")
	}
	if !tb.admit(&net.TCPAddr{IP: net.IPv4(192, 0, 2, 2)}, now) {
		t.Error("another host was refused")
	}
	// Forgotten after offenderMemory without an offense.
	later := now.Add(offenderMemory + time.Second)
	if !tb.admit(a, later) || !tb.admit(a, later) {
		t.Error("an address was still throttled after its memory ran out")
	}
	if len(tb.m) != 0 {
		t.Errorf("the table kept %d forgotten entries", len(tb.m))
	}
}

func TestOffendersIPv6Prefix(t *testing.T) {
	tb := offenders{maxInterval: time.Second}
	now := time.Unix(1000, 0)
	tb.offended(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1")}, now)
	if tb.admit(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::9")}, now) {
		t.Error("another address of the offender's /64 was served")
	}
	if !tb.admit(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1")}, now) {
		t.Error("an address of another /64 was refused")
	}
	// An IPv4-mapped address is its IPv4 address.
	tb.offended(&net.TCPAddr{IP: net.ParseIP("::ffff:198.51.100.7")}, now)
	if tb.admit(&net.TCPAddr{IP: net.IPv4(198, 51, 100, 7).To4()}, now) {
		t.Error("the IPv4 form of an IPv4-mapped offender was served")
	}
}

func TestOffendersOffAndAddressless(t *testing.T) {
	now := time.Unix(1000, 0)
	off := offenders{}
	a := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1)}
	off.offended(a, now)
	if !off.admit(a, now) || len(off.m) != 0 {
		t.Error("a table that is off throttled or kept an address")
	}
	on := offenders{maxInterval: time.Second}
	u := &net.UnixAddr{Name: "/tmp/s", Net: "unix"}
	on.offended(u, now)
	if !on.admit(u, now) || len(on.m) != 0 {
		t.Error("an address without an IP was throttled or kept")
	}
}

func TestOffendersBounded(t *testing.T) {
	tb := offenders{maxInterval: time.Second}
	now := time.Unix(1000, 0)
	for i := range maxOffenders + 100 {
		ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i))
		tb.offended(&net.TCPAddr{IP: ip}, now)
	}
	if len(tb.m) > maxOffenders {
		t.Errorf("the table holds %d addresses, more than its bound %d", len(tb.m), maxOffenders)
	}
	// Entries past their memory make room before live ones are evicted.
	later := now.Add(offenderMemory + time.Second)
	fresh := &net.TCPAddr{IP: net.IPv4(172, 16, 0, 1)}
	tb.offended(fresh, later)
	if len(tb.m) != 1 {
		t.Errorf("after the memory ran out a new offense left %d entries, want 1", len(tb.m))
	}
}
