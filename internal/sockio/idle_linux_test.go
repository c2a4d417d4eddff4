//go:build linux && !leangrpcportable

package sockio

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

func TestTryReadReady(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)
	for round := range 3 {
		b, err := c.TryReadReady(pool, 1024)
		if b != nil || err != nil {
			t.Fatalf("round %d, idle socket: TryReadReady = %v, %v; want nil, nil", round, b, err)
		}
		if n := pool.Outstanding(); n != 0 {
			t.Fatalf("round %d: outstanding %d after a read that found nothing", round, n)
		}
		msg := []byte{'x', byte(round)}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		// The bytes are in flight on loopback; TryReadReady does not wait.
		for b == nil && err == nil {
			b, err = c.TryReadReady(pool, 1024)
			runtime.Gosched()
		}
		if err != nil || !bytes.Equal(b.Bytes(), msg) {
			t.Fatalf("round %d: TryReadReady = %q, %v; want %q", round, b.Bytes(), err, msg)
		}
		b.Free()
	}
	client.Close()
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = c.TryReadReady(pool, 1024)
		time.Sleep(time.Millisecond)
	}
	if err == nil || err.Error() != "EOF" {
		t.Fatalf("after the peer closed: %v, want EOF", err)
	}
	// A blocking ReadReady afterwards is not affected by the try mode.
	c.Close()
	if _, err := c.ReadReady(pool, 1024); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadReady after Close = %v, want net.ErrClosed", err)
	}
}

// TestOnReadable checks that the callback runs once bytes arrive and not
// before, that no goroutine per waiting conn exists meanwhile, that bytes
// queued before arming fire at once, and that re-arming works.
func TestOnReadable(t *testing.T) {
	const conns = 50
	type pair struct {
		client net.Conn
		c      *Conn
		fired  chan struct{}
	}
	pairs := make([]pair, conns)
	for i := range pairs {
		client, server := tcpPair(t)
		pairs[i] = pair{client, Wrap(server, true).(*Conn), make(chan struct{}, 4)}
	}
	// Start the poller before counting goroutines.
	if err := StartIdlePoller(); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	for round := range 3 {
		for i := range pairs {
			p := &pairs[i]
			if err := p.c.OnReadable(func() { p.fired <- struct{}{} }); err != nil {
				t.Fatalf("round %d: OnReadable: %v", round, err)
			}
		}
		if g := runtime.NumGoroutine(); g > base {
			t.Errorf("round %d: %d goroutines with %d conns waiting, %d before", round, g, conns, base)
		}
		time.Sleep(20 * time.Millisecond)
		for i := range pairs {
			select {
			case <-pairs[i].fired:
				t.Fatalf("round %d: conn %d fired with nothing to read", round, i)
			default:
			}
		}
		for i := range pairs {
			if _, err := pairs[i].client.Write([]byte{byte(round)}); err != nil {
				t.Fatal(err)
			}
		}
		pool := bufpool.New(nil)
		for i := range pairs {
			select {
			case <-pairs[i].fired:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: conn %d did not fire", round, i)
			}
			b, err := pairs[i].c.ReadReady(pool, 16)
			if err != nil || !bytes.Equal(b.Bytes(), []byte{byte(round)}) {
				t.Fatalf("round %d: conn %d read %v, %v", round, i, b, err)
			}
			b.Free()
		}
	}
	// Bytes queued before arming fire at once.
	p := &pairs[0]
	p.client.Write([]byte("early"))
	time.Sleep(10 * time.Millisecond)
	if err := p.c.OnReadable(func() { p.fired <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.fired:
	case <-time.After(5 * time.Second):
		t.Fatal("bytes queued before OnReadable did not fire it")
	}
	for i := range pairs {
		pairs[i].c.Close()
		pairs[i].client.Close()
	}
}

// TestOnReadableHangupAndClose checks that a wait ends when the peer hangs
// up and when the conn is closed locally, and that OnReadable on a closed
// conn fails.
func TestOnReadableHangupAndClose(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	fired := make(chan struct{}, 1)
	if err := c.OnReadable(func() { fired <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	client.Close()
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("a hang-up did not fire OnReadable")
	}
	if _, err := c.ReadReady(nil, 16); err == nil || err.Error() != "EOF" {
		t.Fatalf("after the hang-up: %v, want EOF", err)
	}

	_, server2 := tcpPair(t)
	c2 := Wrap(server2, true).(*Conn)
	if err := c2.OnReadable(func() { fired <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not fire OnReadable")
	}
	if _, err := c2.ReadReady(nil, 16); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after Close: %v, want net.ErrClosed", err)
	}
	if err := c2.OnReadable(func() { t.Error("fired on a closed conn") }); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("OnReadable after Close = %v, want net.ErrClosed", err)
	}
	c.Close()
}

// TestOnReadableRaceClose arms and closes concurrently with the peer
// writing: the callback runs exactly once per arming.
func TestOnReadableRaceClose(t *testing.T) {
	for i := range 50 {
		client, server := tcpPair(t)
		c := Wrap(server, true).(*Conn)
		var mu sync.Mutex
		calls := 0
		done := make(chan struct{})
		if err := c.OnReadable(func() {
			mu.Lock()
			calls++
			mu.Unlock()
			done <- struct{}{}
		}); err != nil {
			t.Fatal(err)
		}
		go client.Write([]byte("x"))
		if i%2 == 0 {
			runtime.Gosched()
		}
		c.Close()
		<-done
		time.Sleep(time.Millisecond)
		mu.Lock()
		if calls != 1 {
			t.Fatalf("iteration %d: callback ran %d times, want 1", i, calls)
		}
		mu.Unlock()
		client.Close()
	}
}

// tryReadySource is what h2conn's flush-wait needs of a socket, and
// idleWaiter what the connection engine needs to leave an idle conn without
// a goroutine.
type tryReadySource interface {
	readySource
	TryReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error)
}

type idleWaiter interface {
	OnReadable(fn func()) error
}

var (
	_ tryReadySource = (*Conn)(nil)
	_ idleWaiter     = (*Conn)(nil)
)

// TestReadReadyWithin checks that the bounded wait returns bytes that are
// there or come in time, gives up with no buffer and no error otherwise, and
// leaves no read deadline behind.
func TestReadReadyWithin(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)

	client.Write([]byte("now"))
	var b *bufpool.Buffer
	var err error
	for b == nil && err == nil { // loopback delivery is not instant
		b, err = c.ReadReadyWithin(pool, 64, time.Second)
	}
	if err != nil || string(b.Bytes()) != "now" {
		t.Fatalf("bytes already there: %v, %v", b, err)
	}
	b.Free()

	b, err = c.ReadReadyWithin(pool, 64, 20*time.Millisecond)
	if b != nil || err != nil {
		t.Fatalf("idle socket: ReadReadyWithin = %v, %v; want nil, nil", b, err)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("outstanding %d after giving up", n)
	}

	go func() {
		time.Sleep(30 * time.Millisecond)
		client.Write([]byte("later"))
	}()
	b, err = c.ReadReadyWithin(pool, 64, 10*time.Second)
	if err != nil || string(b.Bytes()) != "later" {
		t.Fatalf("bytes during the wait: %v, %v", b, err)
	}
	b.Free()

	// No deadline left behind: a plain wait outlasts the bounds used above.
	go func() {
		time.Sleep(50 * time.Millisecond)
		client.Write([]byte("plain"))
	}()
	b, err = c.ReadReady(pool, 64)
	if err != nil || string(b.Bytes()) != "plain" {
		t.Fatalf("ReadReady after ReadReadyWithin: %v, %v", b, err)
	}
	b.Free()
	c.Close()
	if b, err := c.ReadReadyWithin(pool, 64, time.Second); b != nil || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after Close: %v, %v; want net.ErrClosed", b, err)
	}
}

// TestReadReadyWithinLeavesDeadlineArmed checks the deadline ReadReadyWithin
// keeps across calls: a stale one neither fails nor cuts short a later
// bounded wait, and reads without a bound (TryReadReady, Read, ReadReady)
// never see it.
func TestReadReadyWithinLeavesDeadlineArmed(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	defer c.Close()
	pool := bufpool.New(nil)
	const d = 40 * time.Millisecond

	waitFor := func(msg string) {
		t.Helper()
		go func() {
			time.Sleep(5 * time.Millisecond)
			client.Write([]byte(msg))
		}()
		b, err := c.ReadReadyWithin(pool, 64, time.Second)
		if err != nil || b == nil || string(b.Bytes()) != msg {
			t.Fatalf("waiting for %q: %v, %v", msg, b, err)
		}
		b.Free()
	}

	// A wait under a 1 s bound leaves its deadline armed; a later call
	// with a short bound re-arms it rather than waiting up to 1 s.
	waitFor("a")
	if c.rdl == 0 {
		t.Fatal("no deadline left armed after a wait that got bytes")
	}
	start := time.Now()
	if b, err := c.ReadReadyWithin(pool, 64, d); b != nil || err != nil {
		t.Fatalf("idle socket: %v, %v; want nil, nil", b, err)
	}
	if el := time.Since(start); el < d/2 || el > 900*time.Millisecond {
		t.Fatalf("bounded wait of %v gave up after %v", d, el)
	}

	// A deadline that expired while nobody read: bytes that are there are
	// returned, not a timeout.
	waitFor("b")
	time.Sleep(1100 * time.Millisecond)
	client.Write([]byte("c"))
	time.Sleep(10 * time.Millisecond)
	b, err := c.ReadReadyWithin(pool, 64, time.Second)
	if err != nil || b == nil || string(b.Bytes()) != "c" {
		t.Fatalf("after a stale deadline: %v, %v; want %q", b, err, "c")
	}
	b.Free()

	// Unbounded reads clear it: TryReadReady on an idle socket is nil,
	// nil, and Read outlasts the armed deadline.
	waitFor("d")
	if b, err := c.TryReadReady(pool, 64); b != nil || err != nil {
		t.Fatalf("TryReadReady after ReadReadyWithin: %v, %v; want nil, nil", b, err)
	}
	waitFor("e")
	go func() {
		time.Sleep(1200 * time.Millisecond)
		client.Write([]byte("f"))
	}()
	p := make([]byte, 8)
	if n, err := c.Read(p); err != nil || string(p[:n]) != "f" {
		t.Fatalf("Read after ReadReadyWithin: %q, %v", p[:n], err)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("outstanding %d", n)
	}
}

// TestOnReadableAfterCloseBehindItsBack: a wrapped conn closed directly
// (as a listener wrapper may close what it accepted) frees its descriptor
// number for the next conn; closing the stale Conn afterwards must not take
// the new conn's poller registration, or the new conn would never wake.
func TestOnReadableAfterCloseBehindItsBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, server1 := tcpPair(t)
	stale := Wrap(server1, true).(*Conn)
	if err := stale.OnReadable(func() {}); err != nil {
		t.Fatal(err)
	}
	// The next connection's client socket exists before the number is
	// freed, so that the accepted socket takes the lowest free number:
	// the one closed behind the stale Conn's back.
	client2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client2.Close()
	server1.Close()
	s2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fresh := Wrap(s2.(*net.TCPConn), true).(*Conn)
	defer fresh.Close()
	if fresh.fd != stale.fd {
		t.Skipf("the descriptor number was not reused (%d, %d)", stale.fd, fresh.fd)
	}
	woke := make(chan struct{})
	if err := fresh.OnReadable(func() { close(woke) }); err != nil {
		t.Fatal(err)
	}
	stale.Close()
	if _, err := client2.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woke:
	case <-time.After(5 * time.Second):
		t.Fatal("the new conn's callback never ran: the stale conn's Close took its registration")
	}
}
