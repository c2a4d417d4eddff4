//go:build linux && !leangrpcportable

package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// testHandler is a ReadHandler from a function and a fixed bound.
type testHandler struct {
	read   func(b *bufpool.Buffer) (bool, error)
	within time.Duration
}

func (d *testHandler) HandleRead(b *bufpool.Buffer) (bool, error) { return d.read(b) }
func (d *testHandler) ReadWait() time.Duration                    { return d.within }

// handlerFunc is a testHandler with the bound within.
func handlerFunc(within time.Duration, f func(b *bufpool.Buffer) (bool, error)) *testHandler {
	return &testHandler{read: f, within: within}
}

func TestReadEachStream(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)

	var writes []int
	for n := 1; n <= 256<<10; n *= 4 {
		writes = append(writes, n, n+3)
	}
	total := 0
	for _, n := range writes {
		total += n
	}
	want := pattern(0, total)
	go func() {
		off := 0
		for _, n := range writes {
			client.Write(want[off : off+n])
			off += n
		}
	}()

	// Each read's bytes arrive in order, in a buffer of the size asked
	// for; ReadEach returns when the ReadHandler says so.
	var got []byte
	for i, size := range []int{7, 4096, 16<<10 + 9, 256 << 10} {
		until := total * (i + 1) / 4
		timedOut, err := c.ReadEach(pool, size, handlerFunc(10*time.Second, func(b *bufpool.Buffer) (bool, error) {
			if b.Len() == 0 || b.Len() > size {
				t.Errorf("read of %d bytes with size %d", b.Len(), size)
			}
			got = append(got, b.Bytes()...)
			b.Free()
			return len(got) < until, nil
		}))
		if timedOut || err != nil {
			t.Fatalf("ReadEach(size %d) = %v, %v", size, timedOut, err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes that differ from the %d written", len(got), total)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d after freeing everything, want 0", n)
	}
}

// TestReadEachNoLostWakeup plays ping-pong where each answer is sent while the
// ReadHandler still holds the previous message, so that it often arrives between
// a short read and the wait ReadEach parks in without reading: an edge lost
// there would hang the exchange. It also checks that those waits go
// without the empty read ReadReady makes (under a bound, as ReadEach does it
// only then): the reads that find nothing are a small fraction of the
// reads.
func TestReadEachNoLostWakeup(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)
	const rounds = 2000

	echoPeer(client, 0)
	empty0 := readEachEmptyReads.Load()
	if _, err := server.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := 0
	done := make(chan error, 1)
	go func() {
		_, err := c.ReadEach(pool, 1024, handlerFunc(10*time.Second, func(b *bufpool.Buffer) (bool, error) {
			got += b.Len()
			b.Free()
			if got%4 != 0 {
				return true, nil // a split message: wait for its rest
			}
			if got/4 == rounds {
				return false, nil
			}
			_, err := server.Write([]byte("ping"))
			time.Sleep(time.Duration(got/4%3) * 20 * time.Microsecond) // let the answer come in first, sometimes
			return err == nil, err
		}))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		c.Close()
		t.Fatalf("exchange stuck after %d of %d rounds", got/4, rounds)
	}
	if empty := readEachEmptyReads.Load() - empty0; empty > rounds/10 {
		t.Errorf("%d of about %d reads found the socket empty, want few", empty, rounds)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d, want 0", n)
	}
}

func TestReadEachWithin(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	defer c.Close()
	pool := bufpool.New(nil)
	never := handlerFunc(30*time.Millisecond, func(b *bufpool.Buffer) (bool, error) {
		t.Errorf("HandleRead of %q on an idle socket", b.Bytes())
		b.Free()
		return false, nil
	})

	// An idle socket: ReadEach gives up after the bound, holding nothing.
	start := time.Now()
	timedOut, err := c.ReadEach(pool, 64, never)
	if !timedOut || err != nil {
		t.Fatalf("idle socket: ReadEach = %v, %v; want true, nil", timedOut, err)
	}
	if d := time.Since(start); d < 15*time.Millisecond {
		t.Fatalf("gave up after %v, before half the bound", d)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("outstanding %d after giving up", n)
	}

	// A deadline left armed by ReadReadyWithin and since expired neither
	// fails ReadEach nor cuts its wait short.
	client.Write([]byte("x"))
	var b *bufpool.Buffer
	for b == nil && err == nil {
		b, err = c.ReadReadyWithin(pool, 64, 20*time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	b.Free()
	time.Sleep(30 * time.Millisecond)
	go func() {
		time.Sleep(40 * time.Millisecond)
		client.Write([]byte("late"))
	}()
	var got []byte
	timedOut, err = c.ReadEach(pool, 64, handlerFunc(time.Second, func(b *bufpool.Buffer) (bool, error) {
		got = append(got, b.Bytes()...)
		b.Free()
		return len(got) < 4, nil
	}))
	if timedOut || err != nil || string(got) != "late" {
		t.Fatalf("after a stale deadline: ReadEach = %v, %v, read %q; want false, nil, %q", timedOut, err, got, "late")
	}

	// The bound is asked before every wait: one that grows while ReadEach
	// runs (a connection's idle wait does) is the one the next wait uses.
	client.Write([]byte("a"))
	go func() {
		time.Sleep(100 * time.Millisecond)
		client.Write([]byte("b"))
	}()
	got = got[:0]
	grows := &testHandler{within: 20 * time.Millisecond}
	grows.read = func(b *bufpool.Buffer) (bool, error) {
		got = append(got, b.Bytes()...)
		b.Free()
		grows.within = 10 * time.Second
		return len(got) < 2, nil
	}
	if timedOut, err := c.ReadEach(pool, 64, grows); timedOut || err != nil || string(got) != "ab" {
		t.Fatalf("a bound grown to 10s: ReadEach = %v, %v, read %q; want false, nil, %q", timedOut, err, got, "ab")
	}

	// Without a bound there is no deadline: a wait outlasts the ones above.
	go func() {
		time.Sleep(50 * time.Millisecond)
		client.Write([]byte("plain"))
	}()
	got = got[:0]
	if _, err := c.ReadEach(pool, 64, handlerFunc(0, func(b *bufpool.Buffer) (bool, error) {
		got = append(got, b.Bytes()...)
		b.Free()
		return len(got) < 5, nil
	})); err != nil || string(got) != "plain" {
		t.Fatalf("unbounded ReadEach: %v, read %q", err, got)
	}
}

func TestReadEachEnds(t *testing.T) {
	pool := bufpool.New(nil)

	t.Run("HandlerError", func(t *testing.T) {
		client, server := tcpPair(t)
		c := Wrap(server, true).(*Conn)
		defer c.Close()
		client.Write([]byte("abc"))
		errStop := errors.New("stop")
		timedOut, err := c.ReadEach(pool, 64, handlerFunc(0, func(b *bufpool.Buffer) (bool, error) {
			b.Free()
			return false, errStop
		}))
		if timedOut || err != errStop {
			t.Fatalf("ReadEach = %v, %v; want false and the ReadHandler's error", timedOut, err)
		}
	})

	t.Run("EOF", func(t *testing.T) {
		client, server := tcpPair(t)
		c := Wrap(server, true).(*Conn)
		defer c.Close()
		client.Write([]byte("last"))
		var got []byte
		_, err := c.ReadEach(pool, 64, handlerFunc(10*time.Second, func(b *bufpool.Buffer) (bool, error) {
			got = append(got, b.Bytes()...)
			b.Free()
			if len(got) == 4 {
				client.Close() // after the read: its edge wakes the parked ReadEach
			}
			return true, nil
		}))
		if err != io.EOF || string(got) != "last" {
			t.Fatalf("ReadEach = %v after reading %q; want io.EOF after %q", err, got, "last")
		}
	})

	// An end queued behind the bytes of a short read leaves no edge to
	// wake on: a bounded ReadEach sees it when the bound passes (and the
	// caller's next read finds it); an unbounded one reads again before it
	// parks and sees it at once.
	t.Run("EOFQueuedBehindBytes", func(t *testing.T) {
		for _, within := range []time.Duration{50 * time.Millisecond, 0} {
			client, server := tcpPair(t)
			c := Wrap(server, true).(*Conn)
			client.Write([]byte("last"))
			client.Close()
			time.Sleep(20 * time.Millisecond) // both arrive before the first read
			var got []byte
			timedOut, err := c.ReadEach(pool, 64, handlerFunc(within, func(b *bufpool.Buffer) (bool, error) {
				got = append(got, b.Bytes()...)
				b.Free()
				return true, nil
			}))
			if string(got) != "last" {
				t.Fatalf("within %v: read %q, want %q", within, got, "last")
			}
			switch {
			case within > 0 && !(timedOut && err == nil) && err != io.EOF:
				t.Fatalf("within %v: ReadEach = %v, %v; want the bound, or io.EOF", within, timedOut, err)
			case within == 0 && err != io.EOF:
				t.Fatalf("unbounded: ReadEach = %v, %v; want io.EOF", timedOut, err)
			}
			if b, err := c.ReadReady(pool, 64); b != nil || err != io.EOF {
				t.Fatalf("within %v: ReadReady after ReadEach = %v, %v; want io.EOF", within, b, err)
			}
			c.Close()
		}
	})

	t.Run("Close", func(t *testing.T) {
		_, server := tcpPair(t)
		c := Wrap(server, true).(*Conn)
		var reads atomic.Int32
		errc := make(chan error, 1)
		go func() {
			_, err := c.ReadEach(pool, 64, handlerFunc(0, func(b *bufpool.Buffer) (bool, error) {
				reads.Add(1)
				b.Free()
				return true, nil
			}))
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond)
		c.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("ReadEach after Close = %v, want net.ErrClosed", err)
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "read" {
				t.Fatalf("error %#v is not a *net.OpError with op read", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not end ReadEach")
		}
		if reads.Load() != 0 {
			t.Fatalf("%d reads on a socket nobody wrote to", reads.Load())
		}
	})
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d, want 0", n)
	}
}

func TestReadEachAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)
	const size, runs = 256, 100
	if _, err := client.Write(make([]byte, size*(runs+10))); err != nil {
		t.Fatal(err)
	}
	d := handlerFunc(time.Second, func(b *bufpool.Buffer) (bool, error) {
		b.Free()
		return false, nil
	})
	var derr error
	allocs := testing.AllocsPerRun(runs, func() {
		if _, err := c.ReadEach(pool, size, d); err != nil {
			derr = err
		}
	})
	if derr != nil {
		t.Fatal(derr)
	}
	if allocs != 0 {
		t.Fatalf("ReadEach of one read: %v allocs per call, want 0", allocs)
	}
}
