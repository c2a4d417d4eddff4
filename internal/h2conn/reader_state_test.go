package h2conn

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// Direct tests of the read role's transitions and of the lone-call path's
// decisions (reader.go), on connections that were never started.

// bareConn is a connection of role over one end of a pipe, never started;
// the other end is closed at the test's end.
func bareConn(t *testing.T, role Role) (*Conn, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return newConn(a, Config{Pool: bufpool.New(nil)}, role, nil), b
}

// The holder offers the role, a caller takes it and hands it back to a
// reader; the reader running an inline handler takes its own offer back; a take finds nothing to take unless the role is offered; every
// change keeps the sticky bits and is stamped with the watcher's epoch.
func TestRoleTransitions(t *testing.T) {
	c, _ := bareConn(t, RoleClient)
	start := roleWatch.epoch.Load() & epochMask
	want := func(step string, holder uint32) {
		t.Helper()
		v := c.roleState()
		if v.holder() != holder {
			t.Fatalf("%s: holder %d, want %d (state %#x)", step, v.holder(), holder, uint32(v))
		}
		if !v.watched() {
			t.Fatalf("%s: the watched bit was lost (state %#x)", step, uint32(v))
		}
		if e := roleWatch.epoch.Load() & epochMask; v.epoch() < start || v.epoch() > e {
			t.Fatalf("%s: stamped with epoch %d, not within the test's epochs %d..%d", step, v.epoch(), start, e)
		}
	}
	// Marked as watched already, so that offers do not put c in the
	// process-wide watcher's list (whose reader would read the pipe).
	c.readRole.Store(roleWatched)
	if c.takeOffered(roleTaken) {
		t.Fatal("took a role a reader holds")
	}
	c.mu.Lock()
	c.offerRoleLocked(roleOffered)
	c.mu.Unlock()
	want("offered", roleOffered)
	if !c.roleState().offered() {
		t.Fatal("an offered role does not say so")
	}
	if !c.takeOffered(roleTaken) {
		t.Fatal("could not take the offered role")
	}
	want("taken by a caller", roleTaken)
	if c.takeOffered(roleTaken) {
		t.Fatal("took a role twice")
	}
	c.returnRoleToReader()
	want("returned to a reader", roleReader)

	c.mu.Lock()
	c.offerRoleLocked(roleOfferedInline)
	c.mu.Unlock()
	want("offered during an inline handler", roleOfferedInline)
	c.stopFlushWaits()
	if !c.takeOffered(roleReader) {
		t.Fatal("the reader could not take back the role it offered to its handler")
	}
	want("taken back by the reader", roleReader)
	if !c.roleState().noFlushWait() {
		t.Fatal("a change of holder cleared the flush-wait switch")
	}
}

// An offer puts the connection in the watcher's list once, marked as
// watched.
func TestOfferJoinsWatcher(t *testing.T) {
	c, peer := bareConn(t, RoleClient)
	peer.Close() // a reader the watcher starts finds the end at once
	c.mu.Lock()
	c.offerRoleLocked(roleOffered)
	c.mu.Unlock()
	if !c.roleState().watched() {
		t.Fatal("an offer left the connection unwatched")
	}
	// Within a few ticks the watcher hands the role to a reader goroutine,
	// which finds the closed pipe and ends the connection.
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("the watcher did not hand the offered role to a reader (state %#x)", c.readRole.Load())
	}
}

// The watcher gives an offered role to a reader only once it has been
// offered for a whole tick (two epochs), across the epoch's wraparound;
// it stops watching a connection whose reader holds the role.
func TestWatcherLook(t *testing.T) {
	c, peer := bareConn(t, RoleClient)
	e := uint32(epochMask) // the last epoch before the counter wraps
	c.readRole.Store(roleWatched | roleOffered | e<<epochShift)
	if !lookAtOffered(c, (e+1)&epochMask) || c.roleState().holder() != roleOffered {
		t.Fatalf("one epoch after the offer: state %#x, want still offered and watched", c.readRole.Load())
	}
	peer.Close() // the reader it starts ends the connection at once
	if !lookAtOffered(c, (e+2)&epochMask) {
		t.Fatal("the watcher dropped a connection whose role it just handed over")
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("two epochs after the offer, no reader took the role (state %#x)", c.readRole.Load())
	}
	if v := c.roleState(); v.holder() != roleReader {
		t.Fatalf("after the reader ended: holder %d, want roleReader", v.holder())
	}
	if lookAtOffered(c, 5) {
		t.Fatal("the watcher kept a connection whose reader holds the role")
	}
	if c.roleState().watched() {
		t.Fatal("the watcher let go of the connection without clearing its watched bit")
	}
}

// After a bounded wait that ran out, offers pause for noOfferBatches
// batches, each asking once.
func TestOffersPause(t *testing.T) {
	c, _ := bareConn(t, RoleClient)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.offersPausedLocked() {
		t.Fatal("offers paused on a new connection")
	}
	c.pauseOffersLocked()
	for i := range noOfferBatches {
		if !c.offersPausedLocked() {
			t.Fatalf("offers resumed after %d batches, want %d", i, noOfferBatches)
		}
	}
	if c.offersPausedLocked() {
		t.Fatalf("offers still paused after %d batches", noOfferBatches)
	}
}

// Whether the holder offers the role after a batch, and whether the reader
// runs a handler inline.
func TestOfferDecisions(t *testing.T) {
	client, _ := bareConn(t, RoleClient)
	server, _ := bareConn(t, RoleServer)
	for _, c := range []*Conn{client, server} {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.mayOfferLocked() {
			t.Fatalf("%v: offers over a socket without a bounded wait", c.role)
		}
		c.src = &readSource{wait: time.Millisecond} // as over sockio's Linux socket
		if !c.mayOfferLocked() {
			t.Fatalf("%v: no offer on an idle connection", c.role)
		}
	}
	for _, tc := range []struct {
		what string
		set  func(c *Conn)
	}{
		{"two streams open", func(c *Conn) { c.numLocal, c.numPeer = 1, 1 }},
		{"a goroutine parked for frames", func(c *Conn) { c.parked.Store(1) }},
		{"closing", func(c *Conn) { c.closing = true }},
		{"in a synctest bubble", func(c *Conn) { cfg := *c.cfg; cfg.inBubble = true; c.cfg = &cfg }},
	} {
		cfg := client.cfg
		tc.set(client)
		if client.mayOfferLocked() {
			t.Errorf("offers with %s", tc.what)
		}
		client.numLocal, client.numPeer, client.closing, client.cfg = 0, 0, false, cfg
		client.parked.Store(0)
	}

	// A client offers to its next caller; a server only to the handler
	// of its one stream.
	if !client.offerAfterBatchLocked() {
		t.Error("a lone client does not offer its role after a batch")
	}
	if server.offerAfterBatchLocked() {
		t.Error("a server without a stream offers its role: nobody would read the next request")
	}
	server.numPeer = 1
	if !server.offerAfterBatchLocked() {
		t.Error("a server does not offer its role to its one stream's handler")
	}
	server.numPeer = 0
	client.pauseOffersLocked()
	if client.offerAfterBatchLocked() {
		t.Error("a client offers its role while offers are paused")
	}
	if client.noOfferLeft != noOfferBatches-1 {
		t.Errorf("a batch without an offer left %d batches of the pause, want %d", client.noOfferLeft, noOfferBatches-1)
	}
	client.noOfferLeft = 0

	complete := &Stream{recvEOF: true}
	if !server.runInlineLocked(complete, true) {
		t.Error("the reader does not run the handler of a complete request on a lone connection")
	}
	if server.runInlineLocked(complete, false) {
		t.Error("the reader runs a handler inline with other streams open")
	}
	if server.runInlineLocked(&Stream{}, true) {
		t.Error("the reader runs a handler inline before its request is complete")
	}
}

// The flush of a unary call's request, or of an inline handler's answer,
// waits for what answers it; other flushes do not.
func TestFlushWaitDecision(t *testing.T) {
	client, _ := bareConn(t, RoleClient)
	server, _ := bareConn(t, RoleServer)
	offered, inline := roleWord(roleWatched|roleOffered), roleWord(roleWatched|roleOfferedInline)
	unary := func() *Stream {
		return &Stream{local: true, unary: true, state: stateHalfClosedLocal}
	}
	client.mu.Lock()
	defer client.mu.Unlock()
	server.mu.Lock()
	defer server.mu.Unlock()
	client.numLocal = 1
	if kind, ok := client.flushWaitKindLocked(unary(), offered); !ok || kind != roleOffered {
		t.Errorf("a unary call's request: (%d, %v), want a flush-wait offering the role back", kind, ok)
	}
	for _, tc := range []struct {
		what string
		s    *Stream
		v    roleWord
		set  func()
	}{
		{"a streaming call", &Stream{local: true, state: stateHalfClosedLocal}, offered, nil},
		{"a request not yet complete", &Stream{local: true, unary: true, state: stateOpen}, offered, nil},
		{"a role a reader holds", unary(), roleWord(roleWatched | roleReader), nil},
		{"two streams open", unary(), offered, func() { client.numLocal = 2 }},
		{"a goroutine parked for frames", unary(), offered, func() { client.parked.Store(1) }},
		{"offers paused", unary(), offered, func() { client.noOfferLeft = 1 }},
		{"no stream", nil, offered, nil},
	} {
		if tc.set != nil {
			tc.set()
		}
		if _, ok := client.flushWaitKindLocked(tc.s, tc.v); ok {
			t.Errorf("client: a flush-wait for %s", tc.what)
		}
		client.numLocal, client.noOfferLeft = 1, 0
		client.parked.Store(0)
	}

	answered := &Stream{state: stateClosed}
	if kind, ok := server.flushWaitKindLocked(answered, inline); !ok || kind != roleOfferedInline {
		t.Errorf("an inline handler's answer: (%d, %v), want a flush-wait offering the role back to the reader", kind, ok)
	}
	if _, ok := server.flushWaitKindLocked(answered, inline|roleNoFlushWait); ok {
		t.Error("server: a flush-wait after flush-waits were stopped")
	}
	if _, ok := server.flushWaitKindLocked(&Stream{state: stateHalfClosedRemote}, inline); ok {
		t.Error("server: a flush-wait before the answer is complete")
	}
	server.numPeer = 1
	if _, ok := server.flushWaitKindLocked(answered, inline); ok {
		t.Error("server: a flush-wait with another request's stream open")
	}
	server.numPeer = 0
}

// fakeSocket is a readySocket that records how it was asked for bytes and
// has none.
type fakeSocket struct {
	calls []string
}

func (f *fakeSocket) Read([]byte) (int, error) {
	f.calls = append(f.calls, "Read")
	return 0, io.EOF
}

func (f *fakeSocket) ReadReady(*bufpool.Pool, int) (*bufpool.Buffer, error) {
	f.calls = append(f.calls, "ReadReady")
	return nil, io.EOF
}

func (f *fakeSocket) ReadReadyWithin(_ *bufpool.Pool, _ int, d time.Duration) (*bufpool.Buffer, error) {
	f.calls = append(f.calls, "ReadReadyWithin "+d.String())
	return nil, nil // the bound ran out
}

// The frame reader's source gives bytes read elsewhere first; then waits
// for the socket, bounded when a wait is set (ErrWouldBlock when the bound
// runs out); a ReadEach's parse gets fed bytes only.
func TestReadSource(t *testing.T) {
	pool := bufpool.New(nil)
	sock := &fakeSocket{}
	s := &readSource{sock: sock}
	fed := pool.Get(16)
	s.fed = fed
	if b, err := s.NextBuffer(pool, 16); b != fed || err != nil {
		t.Fatalf("with bytes fed: (%p, %v), want the fed buffer", b, err)
	}
	if len(sock.calls) != 0 || s.fed != nil {
		t.Fatalf("giving fed bytes asked the socket %q, or kept them (%p)", sock.calls, s.fed)
	}
	fed.Free()

	s.wait = time.Millisecond
	if _, err := s.NextBuffer(pool, 16); err != h2frame.ErrWouldBlock {
		t.Fatalf("a bounded wait that ran out: %v, want ErrWouldBlock", err)
	}
	s.wait = 0
	if _, err := s.NextBuffer(pool, 16); err != io.EOF {
		t.Fatalf("an unbounded wait: %v, want the socket's EOF", err)
	}
	s.Read(nil)
	if got, want := strings.Join(sock.calls, ", "), "ReadReadyWithin 1ms, ReadReady, Read"; got != want {
		t.Fatalf("the socket was asked %q, want %q", got, want)
	}

	sock.calls = nil
	s.fedOnly = true
	if _, err := s.NextBuffer(pool, 16); err != h2frame.ErrWouldBlock {
		t.Fatalf("fed bytes only, none left: %v, want ErrWouldBlock", err)
	}
	if _, err := s.Read(make([]byte, 4)); err != errFedMidFrame {
		t.Fatalf("fed bytes only, a read for the rest of a frame: %v, want errFedMidFrame", err)
	}
	if len(sock.calls) != 0 {
		t.Fatalf("a ReadEach's parse asked the socket %q", sock.calls)
	}
	s.fed = pool.Get(16)
	s.close()
	if s.fed != nil || pool.Outstanding() != 0 {
		t.Fatalf("close kept fed bytes: %p, %d outstanding", s.fed, pool.Outstanding())
	}
}
