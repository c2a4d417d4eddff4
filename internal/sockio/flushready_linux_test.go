//go:build linux && !leangrpcportable

package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// flushFunc is a Flusher from a function, counting its calls.
type flushFunc struct {
	f     func() error
	calls int
}

func (f *flushFunc) Flush() error { f.calls++; return f.f() }

// echoPeer answers each read on peer with its bytes, for rounds reads or,
// with rounds 0, until a read fails.
func echoPeer(peer net.Conn, rounds int) {
	go func() {
		buf := make([]byte, 64)
		for i := 0; rounds == 0 || i < rounds; i++ {
			n, err := peer.Read(buf)
			if err != nil {
				return
			}
			peer.Write(buf[:n])
		}
	}()
}

// FlushReadyWithin flushes once, from inside the wait, and returns the
// answer. The answer here comes before the flush returns: a wait that
// began after the flush would have its edge cleared and sleep until the
// bound.
func TestFlushReadyWithinAnswer(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)
	echoPeer(client, 1)
	f := &flushFunc{f: func() error {
		_, err := c.Conn.Write([]byte("ping"))
		time.Sleep(20 * time.Millisecond) // the echo arrives meanwhile
		return err
	}}
	start := time.Now()
	b, ferr, err := c.FlushReadyWithin(pool, 4096, 10*time.Second, f)
	if ferr != nil || err != nil || b == nil {
		t.Fatalf("FlushReadyWithin: buffer %v, flush error %v, error %v", b != nil, ferr, err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the answer took %v: its edge was lost", waited)
	}
	if got := string(b.Bytes()); got != "ping" || f.calls != 1 {
		t.Fatalf("answer %q after %d flushes, want %q after 1", got, f.calls, "ping")
	}
	b.Free()
	if out := pool.Outstanding(); out != 0 {
		t.Fatalf("%d buffers outstanding", out)
	}
}

// Bytes that were in the socket before the wait began come with the
// answer: the answer's edge wakes the wait, and its read takes both.
func TestFlushReadyWithinEarlierBytes(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)
	client.Write([]byte("early,"))
	time.Sleep(10 * time.Millisecond) // in the socket, with its edge gone by
	echoPeer(client, 1)
	f := &flushFunc{f: func() error {
		_, err := c.Conn.Write([]byte("answer"))
		return err
	}}
	var got []byte
	deadline := time.Now().Add(5 * time.Second)
	for !bytes.Equal(got, []byte("early,answer")) && time.Now().Before(deadline) {
		b, ferr, err := c.FlushReadyWithin(pool, 4096, time.Second, f)
		if ferr != nil || err != nil {
			t.Fatalf("FlushReadyWithin: flush error %v, error %v", ferr, err)
		}
		if b != nil {
			got = append(got, b.Bytes()...)
			b.Free()
		}
		f.f = func() error { return nil } // later rounds only wait
	}
	if string(got) != "early,answer" {
		t.Fatalf("read %q, want %q", got, "early,answer")
	}
}

// Without an answer the wait ends at its bound, with no buffer and no
// error, and holds nothing; a flush that fails is reported apart, with no
// read; a closed conn still flushes and reports the read's error.
func TestFlushReadyWithinEnds(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)
	f := &flushFunc{f: func() error { return nil }}
	start := time.Now()
	b, ferr, err := c.FlushReadyWithin(pool, 4096, 20*time.Millisecond, f)
	if b != nil || ferr != nil || err != nil || f.calls != 1 {
		t.Fatalf("unanswered wait: buffer %v, flush error %v, error %v, %d flushes", b != nil, ferr, err, f.calls)
	}
	if waited := time.Since(start); waited < 10*time.Millisecond {
		t.Fatalf("unanswered wait returned after %v, before half its bound", waited)
	}
	if out := pool.Outstanding(); out != 0 {
		t.Fatalf("%d buffers outstanding after the bound", out)
	}

	boom := errors.New("boom")
	client.Write([]byte("x"))
	f = &flushFunc{f: func() error { return boom }}
	b, ferr, err = c.FlushReadyWithin(pool, 4096, time.Second, f)
	if b != nil || ferr != boom || err != nil {
		t.Fatalf("failed flush: buffer %v, flush error %v, error %v", b != nil, ferr, err)
	}
	// The byte is still there for the next read.
	if b, err := c.ReadReady(pool, 4096); err != nil || string(b.Bytes()) != "x" {
		t.Fatalf("after a failed flush, ReadReady: %v", err)
	} else {
		b.Free()
	}

	// The peer's FIN came before the wait began, so its edge is gone:
	// the wait ends at EOF or, when the edge was cleared, at its bound,
	// and the next read finds the EOF.
	client.Close()
	time.Sleep(10 * time.Millisecond)
	f = &flushFunc{f: func() error { return nil }}
	b, ferr, err = c.FlushReadyWithin(pool, 4096, 20*time.Millisecond, f)
	if b != nil || ferr != nil || err != nil && err != io.EOF || f.calls != 1 {
		t.Fatalf("peer closed: buffer %v, flush error %v, error %v, %d flushes", b != nil, ferr, err, f.calls)
	}
	if err == nil {
		if _, err := c.ReadReady(pool, 4096); err != io.EOF {
			t.Fatalf("peer closed, read after the bound: %v, want EOF", err)
		}
	}
	c.Close()
	f = &flushFunc{f: func() error { return nil }}
	if _, _, err := c.FlushReadyWithin(pool, 4096, time.Second, f); err == nil || f.calls != 1 {
		t.Fatalf("closed conn: error %v after %d flushes, want an error after 1", err, f.calls)
	}
	if out := pool.Outstanding(); out != 0 {
		t.Fatalf("%d buffers outstanding", out)
	}
}

// A FlushReadyWithin round allocates nothing.
func TestFlushReadyWithinAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)
	msg := []byte("0123456789")
	echoPeer(client, 0)
	f := &flushFunc{f: func() error {
		_, err := c.Conn.Write(msg)
		return err
	}}
	round := func() {
		b, ferr, err := c.FlushReadyWithin(pool, 4096, time.Second, f)
		if ferr != nil || err != nil || b == nil {
			t.Fatalf("round: flush error %v, error %v", ferr, err)
		}
		b.Free()
	}
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per round", n)
	}
}
