//go:build linux && !leangrpcportable

package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// sendInParts writes b to c in parts bursts, gap apart, on a goroutine; the
// channel reports the first write error (or nil) once all are written.
// With afterPark set, each burst after the first also waits until a
// ReadFull parked since the last one (lowWaterWaits), so that the reader
// has taken the bytes before and waits for more.
func sendInParts(c net.Conn, b []byte, parts int, gap time.Duration, afterPark bool) <-chan error {
	done := make(chan error, 1)
	go func() {
		step := (len(b) + parts - 1) / parts
		waits := lowWaterWaits.Load()
		for off := 0; off < len(b); off += step {
			if off > 0 {
				time.Sleep(gap)
				for deadline := time.Now().Add(5 * time.Second); afterPark && lowWaterWaits.Load() == waits && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				waits = lowWaterWaits.Load()
			}
			if _, err := c.Write(b[off:min(off+step, len(b))]); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// readFullOf reads n bytes with ReadFull under a bound, failing the test
// if it returns an error or hangs; it returns the bytes and the parks it
// made.
func readFullOf(t *testing.T, c *Conn, n int) ([]byte, int64) {
	t.Helper()
	p := make([]byte, n)
	waits := lowWaterWaits.Load()
	done := make(chan error, 1)
	go func() { done <- c.ReadFull(p, nil) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ReadFull: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadFull hangs")
	}
	return p, lowWaterWaits.Load() - waits
}

// A frame's rest that arrives in bursts wakes ReadFull once under the
// mark, and once per burst without it (each burst sent once the reader
// parked).
func TestReadFullWakeUps(t *testing.T) {
	const n, parts = 512 << 10, 8
	for _, on := range []bool{true, false} {
		client, server := tcpPair(t)
		c := Wrap(server, true).(*Conn)
		c.SetLowWater(on)
		want := pattern(0, n)
		sets := lowWaterSets.Load()
		sent := sendInParts(client, want, parts, 10*time.Millisecond, !on)
		got, waits := readFullOf(t, c, n)
		sets = lowWaterSets.Load() - sets
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("mark %v: bytes differ", on)
		}
		if !lowWaterKernel() {
			t.Skip("kernel before 4.18: no mark")
		}
		t.Logf("mark %v: %d parks for %d bursts", on, waits, parts)
		switch {
		case on && waits > 3:
			// The kernel may wake a reader under a mark early when the
			// receive window closes, so a park or two more are allowed.
			t.Errorf("mark on: %d parks for one frame in %d bursts, want at most 3", waits, parts)
		case !on && waits < parts-1:
			t.Errorf("mark off: %d parks for %d bursts each sent after a park, want at least %d", waits, parts, parts-1)
		case on && sets == 0:
			t.Error("mark on: no mark set")
		case !on && sets != 0:
			t.Errorf("mark off: %d marks set", sets)
		}
	}
}

// A mark never makes the receive window smaller: Linux grows a receive
// buffer below twice the mark, and the window clamp, when it sets one, and
// leaves a buffer the user sized alone (capping the mark at half of it
// instead, so that a frame larger than that buffer still completes).
func TestReadFullMarkKeepsWindow(t *testing.T) {
	if !lowWaterKernel() {
		t.Skip("kernel before 4.18: no mark")
	}
	sizes := func(c *Conn) (rcvbuf, clamp int) {
		t.Helper()
		var err error
		c.w.rc.Control(func(fd uintptr) {
			if rcvbuf, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF); err != nil {
				return
			}
			clamp, err = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_WINDOW_CLAMP)
		})
		if err != nil {
			t.Fatal(err)
		}
		return rcvbuf, clamp
	}
	// markedFrame reads a frame of n bytes sent in two bursts until the
	// reader parked under a mark between them (a loaded machine may take
	// the first burst late, so the gap grows).
	markedFrame := func(client net.Conn, c *Conn, n int) {
		t.Helper()
		for gap := 20 * time.Millisecond; ; gap *= 2 {
			sets := lowWaterSets.Load()
			sent := sendInParts(client, pattern(0, n), 2, gap, false)
			if got, _ := readFullOf(t, c, n); !bytes.Equal(got, pattern(0, n)) {
				t.Fatal("bytes differ")
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if lowWaterSets.Load() > sets {
				return
			}
			if gap >= time.Second {
				t.Fatalf("no mark set for a frame in two bursts %v apart", gap)
			}
		}
	}

	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	c.SetLowWater(true)
	buf0, clamp0 := sizes(c)
	markedFrame(client, c, 256<<10)
	buf1, clamp1 := sizes(c)
	t.Logf("receive buffer %d -> %d, window clamp %d -> %d", buf0, buf1, clamp0, clamp1)
	if buf1 < buf0 || clamp1 < clamp0 {
		t.Errorf("after a mark: receive buffer %d -> %d, window clamp %d -> %d, want neither smaller", buf0, buf1, clamp0, clamp1)
	}

	client, server = tcpPair(t)
	if err := server.SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	c = Wrap(server, true).(*Conn)
	c.SetLowWater(true)
	buf0, _ = sizes(c)
	markedFrame(client, c, 256<<10)
	if buf1, _ := sizes(c); buf1 != buf0 {
		t.Errorf("receive buffer set by the user: %d -> %d after a mark, want it unchanged", buf0, buf1)
	}
}

// After ReadFull left a mark on the socket, the waits that must see the
// first byte lower it: each gets a byte sent alone at once.
func TestReadFullMarkLowered(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	c.SetLowWater(true)
	leaveMark := func() {
		t.Helper()
		// The mark is left when the reader takes the first burst before
		// the second comes; a loaded machine may not schedule it within
		// the gap, so the gap grows until it does.
		for gap := 20 * time.Millisecond; ; gap *= 2 {
			sent := sendInParts(client, pattern(0, 256<<10), 2, gap, false)
			readFullOf(t, c, 256<<10)
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if !lowWaterKernel() {
				t.Skip("kernel before 4.18: no mark")
			}
			if c.mark > 1 {
				return
			}
			if gap >= time.Second {
				t.Fatalf("mark %d after a frame in two bursts %v apart, want one left", c.mark, gap)
			}
		}
	}
	oneByteLater := func() {
		go func() {
			time.Sleep(20 * time.Millisecond)
			client.Write([]byte{7})
		}()
	}
	within := func(what string, f func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s waits for good under the mark ReadFull left", what)
		}
	}

	leaveMark()
	oneByteLater()
	within("ReadReady", func() error {
		b, err := c.ReadReady(nil, 0)
		if b != nil {
			b.Free()
		}
		return err
	})

	leaveMark()
	oneByteLater()
	within("Read", func() error {
		_, err := c.Read(make([]byte, 16))
		return err
	})

	leaveMark()
	oneByteLater()
	within("ReadEach", func() error {
		h := &oneRead{}
		_, err := c.ReadEach(nil, 0, h)
		return err
	})

	leaveMark()
	oneByteLater()
	within("OnReadable", func() error {
		fired := make(chan struct{})
		if err := c.OnReadable(func() { close(fired) }); err != nil {
			return err
		}
		<-fired
		b, err := c.ReadReady(nil, 0)
		if b != nil {
			b.Free()
		}
		return err
	})
}

// oneRead is a ReadHandler that ends ReadEach after one read.
type oneRead struct{}

func (*oneRead) HandleRead(b *bufpool.Buffer) (bool, error) {
	b.Free()
	return false, nil
}
func (*oneRead) ReadWait() time.Duration { return 0 }

// A peer that closes inside the frame ends ReadFull with
// io.ErrUnexpectedEOF at once, under the mark and after a read that
// drained the socket with the FIN queued behind its bytes; one that closes
// before it, with io.EOF; a reset with the reset.
func TestReadFullPeerEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		sent int
		end  func(*net.TCPConn)
		want func(error) bool
	}{
		{"close inside", 100 << 10, func(c *net.TCPConn) { c.Close() }, func(err error) bool { return err == io.ErrUnexpectedEOF }},
		{"close before", 0, func(c *net.TCPConn) { c.Close() }, func(err error) bool { return err == io.EOF }},
		{"reset inside", 100 << 10, func(c *net.TCPConn) { c.SetLinger(0); c.Close() }, func(err error) bool {
			return errors.Is(err, syscall.ECONNRESET) || err == io.ErrUnexpectedEOF
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, together := range []bool{true, false} {
				client, server := tcpPair(t)
				c := Wrap(server, true).(*Conn)
				c.SetLowWater(true)
				done := make(chan error, 1)
				if together {
					// The bytes and the end are queued before ReadFull
					// starts: its one read drains the bytes, and the FIN
					// came before its wait.
					client.Write(pattern(0, tc.sent))
					tc.end(client)
					time.Sleep(20 * time.Millisecond)
				}
				go func() { done <- c.ReadFull(make([]byte, 300<<10), nil) }()
				if !together {
					time.Sleep(20 * time.Millisecond)
					client.Write(pattern(0, tc.sent))
					time.Sleep(20 * time.Millisecond)
					tc.end(client)
				}
				select {
				case err := <-done:
					if !tc.want(err) {
						t.Fatalf("together %v: ReadFull returned %v", together, err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("together %v: ReadFull hangs after the peer's end", together)
				}
			}
		})
	}
}

// Close ends a ReadFull parked under a mark with net.ErrClosed, as Read.
func TestReadFullClose(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	c.SetLowWater(true)
	client.Write(pattern(0, 64<<10))
	done := make(chan error, 1)
	go func() { done <- c.ReadFull(make([]byte, 1<<20), nil) }()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadFull after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFull hangs after Close")
	}
}

// ReadFull allocates nothing.
func TestReadFullAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	c.SetLowWater(true)
	const size, runs = 64 << 10, 20
	go client.Write(make([]byte, size*(runs+2)))
	p := make([]byte, size)
	var rerr error
	allocs := testing.AllocsPerRun(runs, func() {
		if err := c.ReadFull(p, nil); err != nil {
			rerr = err
		}
	})
	if rerr != nil {
		t.Fatal(rerr)
	}
	if allocs != 0 {
		t.Fatalf("ReadFull: %v allocs per call, want 0", allocs)
	}
}

func TestLowWaterDefault(t *testing.T) {
	const env = "LEANGRPC_RCVLOWAT"
	for _, tc := range []struct {
		val  string
		set  bool
		want bool
	}{
		{set: false, want: true},
		{val: "0", set: true, want: false},
		{val: "false", set: true, want: false},
		{val: "1", set: true, want: true},
		{val: "bogus", set: true, want: true},
	} {
		t.Setenv(env, tc.val)
		if !tc.set {
			os.Unsetenv(env)
		}
		if got := LowWaterDefault(); got != tc.want {
			t.Errorf("%s=%q (set %v): LowWaterDefault() = %v, want %v", env, tc.val, tc.set, got, tc.want)
		}
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    bool
	}{
		{"6.8.0-45-generic", true},
		{"4.18.0", true},
		{"4.18", true},
		{"4.17.19-x", false},
		{"4.9.337", false},
		{"3.10.0-1160.el7.x86_64", false},
		{"5.4", true},
		{"", false},
	} {
		if got := kernelAtLeast(tc.release, 4, 18); got != tc.want {
			t.Errorf("kernelAtLeast(%q, 4, 18) = %v, want %v", tc.release, got, tc.want)
		}
	}
}
