//go:build linux && !leangrpcportable

package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

var (
	_ readySource  = (*Conn)(nil)
	_ vectorWriter = (*Conn)(nil)
	_ vectorWriter = (*VecConn)(nil)
)

func TestWrapPathsLinux(t *testing.T) {
	c, _ := tcpPair(t)
	if w, ok := Wrap(c, true).(*Conn); !ok || w.NetConn() != c {
		t.Fatalf("Wrap(tcp, true) = %T, want *Conn over the TCP conn", Wrap(c, true))
	}
	w := Wrap(c, false)
	if _, ok := w.(*VecConn); !ok {
		t.Fatalf("Wrap(tcp, false) = %T, want *VecConn", w)
	}
	if _, ok := w.(readySource); ok {
		t.Fatal("Wrap(tcp, false) implements ReadReady; the frame layer would pool reads")
	}
	if u, ok := Wrap(Wrap(c, true), false).(*VecConn); !ok || u.NetConn() != c {
		t.Fatal("rewrapping a *Conn with pooled=false did not yield a *VecConn over the original conn")
	}

	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if s, err := ln.Accept(); err == nil {
			s.Close()
		}
	}()
	u, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, ok := Wrap(u, true).(*Conn); !ok {
		t.Fatalf("Wrap(unix, true) = %T, want *Conn", Wrap(u, true))
	}
}

// readAll collects want bytes with ReadReady, cycling through sizes, and
// frees every buffer.
func readAll(t *testing.T, c *Conn, pool *bufpool.Pool, want int, sizes []int) []byte {
	t.Helper()
	got := make([]byte, 0, want)
	for i := 0; len(got) < want; i++ {
		size := sizes[i%len(sizes)]
		b, err := c.ReadReady(pool, size)
		if err != nil {
			t.Fatalf("ReadReady after %d of %d bytes: %v", len(got), want, err)
		}
		if b.Len() < 1 || b.Len() > size {
			t.Fatalf("ReadReady(size %d) returned Len %d", size, b.Len())
		}
		got = append(got, b.Bytes()...)
		b.Free()
	}
	return got
}

func TestReadReadyStream(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)

	// Writes of 1 B up to 256 KiB, read back with sizes 1 B up to 256 KiB.
	var writes []int
	for n := 1; n <= 256<<10; n *= 4 {
		writes = append(writes, n, n+3)
	}
	total := 0
	for _, n := range writes {
		total += n
	}
	want := pattern(0, total)
	errc := make(chan error, 1)
	go func() {
		off := 0
		for _, n := range writes {
			if _, err := client.Write(want[off : off+n]); err != nil {
				errc <- err
				return
			}
			off += n
		}
		errc <- nil
	}()

	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := readAll(t, c, pool, total, []int{1, 7, 100, 4096, 16<<10 + 9, 256 << 10})
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes that differ from the %d written", len(got), total)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d after freeing everything, want 0", n)
	}

	// The peer's close is io.EOF, and no buffer is held for it.
	client.Close()
	if b, err := c.ReadReady(pool, 64); err != io.EOF || b != nil {
		t.Fatalf("ReadReady after the peer closed = %v, %v; want nil, io.EOF", b, err)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d after EOF, want 0", n)
	}
}

// waitParked waits until a goroutine sits in the poller inside ReadReady.
func waitParked(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, "sockio.(*Conn).ReadReady") {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no goroutine parked in ReadReady after 5s")
}

type readResult struct {
	b   *bufpool.Buffer
	err error
}

func goReadReady(c *Conn, pool *bufpool.Pool, size int) chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		b, err := c.ReadReady(pool, size)
		ch <- readResult{b, err}
	}()
	return ch
}

func TestReadReadyParkedHoldsNothing(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)

	for round := 0; round < 3; round++ {
		ch := goReadReady(c, pool, 64<<10)
		waitParked(t)
		if n := pool.Outstanding(); n != 0 {
			t.Fatalf("round %d: pool.Outstanding() = %d while parked on an idle socket, want 0", round, n)
		}
		msg := []byte{'a' + byte(round), 'b', 'c'}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if r.err != nil {
			t.Fatalf("round %d: ReadReady: %v", round, r.err)
		}
		if !bytes.Equal(r.b.Bytes(), msg) {
			t.Fatalf("round %d: ReadReady = %q, want %q", round, r.b.Bytes(), msg)
		}
		if n := pool.Outstanding(); n != 1 {
			t.Fatalf("round %d: pool.Outstanding() = %d holding the result, want 1", round, n)
		}
		r.b.Free()
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d, want 0", n)
	}
}

func TestReadReadyDeadline(t *testing.T) {
	_, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)

	for _, d := range []time.Duration{-time.Second, 30 * time.Millisecond} {
		c.SetReadDeadline(time.Now().Add(d))
		b, err := c.ReadReady(pool, 1024)
		if b != nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("deadline %v: ReadReady = %v, %v; want nil and os.ErrDeadlineExceeded", d, b, err)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("deadline %v: error %v is not a net.Error with Timeout()", d, err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "read" {
			t.Fatalf("deadline %v: error %#v is not a *net.OpError with op read", d, err)
		}
		if n := pool.Outstanding(); n != 0 {
			t.Fatalf("pool.Outstanding() = %d after a deadline, want 0", n)
		}
	}
}

func TestReadReadyClose(t *testing.T) {
	_, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)

	ch := goReadReady(c, pool, 1024)
	waitParked(t)
	c.Close()
	select {
	case r := <-ch:
		if r.b != nil || !errors.Is(r.err, net.ErrClosed) {
			t.Fatalf("ReadReady after Close = %v, %v; want nil and net.ErrClosed", r.b, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock ReadReady")
	}
	if _, err := c.ReadReady(pool, 1024); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadReady on a closed conn: %v, want net.ErrClosed", err)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d, want 0", n)
	}
}

func TestReadReadyReset(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)

	// Unread data on close plus linger 0 makes the kernel send RST.
	server.Write([]byte("unread"))
	client.SetLinger(0)
	time.Sleep(10 * time.Millisecond)
	client.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := c.ReadReady(pool, 1024)
	if b != nil || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("ReadReady after RST = %v, %v; want nil and ECONNRESET", b, err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" || oe.Addr == nil {
		t.Fatalf("error %#v is not a *net.OpError with op read and the peer address", err)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d, want 0", n)
	}
}

func TestWriteVecLarge(t *testing.T) {
	client, server := tcpPair(t)
	client.SetWriteBuffer(16 << 10)
	server.SetReadBuffer(16 << 10)
	for _, pooled := range []bool{true, false} {
		w := Wrap(client, pooled)
		vw := w.(vectorWriter)

		// About 4 MiB in 2500 slices (more than one writev's 1024 iovecs),
		// with empty slices scattered in.
		var sizes []int
		for i := 0; i < 2500; i++ {
			switch {
			case i%97 == 0:
				sizes = append(sizes, 0)
			case i%10 == 0:
				sizes = append(sizes, 64<<10+i)
			default:
				sizes = append(sizes, 1+i*7%1000)
			}
		}
		bufs, want := slices(sizes)

		got := slowRead(server, len(want))
		client.SetWriteDeadline(time.Now().Add(20 * time.Second))
		parks := writeParks.Load()
		n, err := vw.WriteVec(bufs)
		if err != nil || n != int64(len(want)) {
			t.Fatalf("pooled %v: WriteVec = %d, %v; want %d, nil", pooled, n, err, len(want))
		}
		if g := <-got; !bytes.Equal(g, want) {
			t.Fatalf("pooled %v: peer read %d bytes that differ from the %d written", pooled, len(g), len(want))
		}
		if writeParks.Load() == parks {
			t.Errorf("pooled %v: WriteVec never parked on a full send buffer; the partial-write path did not run", pooled)
		}
		// The call state went back to writeCalls: most likely the one
		// this goroutine gets next (the pool may hand out a new one,
		// which passes trivially).
		wc := writeCalls.Get().(*writeCall)
		for i, v := range wc.iov[:cap(wc.iov)] {
			if v.Base != nil {
				t.Fatalf("pooled %v: iovec %d still points at caller memory after WriteVec", pooled, i)
			}
		}
		if wc.bufs != nil || wc.w != nil {
			t.Fatalf("pooled %v: the pooled call state keeps the caller's slices or writer", pooled)
		}
		if wc.hi > maxIovecs {
			t.Fatalf("pooled %v: %d iovecs in one writev, limit %d", pooled, wc.hi, maxIovecs)
		}
		writeCalls.Put(wc)
	}
}

func TestWriteVecEmpty(t *testing.T) {
	client, _ := tcpPair(t)
	vw := Wrap(client, true).(vectorWriter)
	for _, bufs := range [][][]byte{nil, {}, {nil, {}}} {
		if n, err := vw.WriteVec(bufs); n != 0 || err != nil {
			t.Fatalf("WriteVec(%v) = %d, %v; want 0, nil", bufs, n, err)
		}
	}
}

func TestWriteVecDeadlineAndClose(t *testing.T) {
	client, _ := tcpPair(t)
	client.SetWriteBuffer(16 << 10)
	c := Wrap(client, true).(*Conn)

	// Nobody reads: the write fills the buffers, parks, and times out.
	big := make([]byte, 32<<20)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.WriteVec([][]byte{big, big})
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WriteVec past the write deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "writev" {
		t.Fatalf("error %#v is not a *net.OpError with op writev", err)
	}
	if n <= 0 || n >= int64(2*len(big)) {
		t.Fatalf("WriteVec reported %d bytes written, want a partial count", n)
	}

	c.SetWriteDeadline(time.Time{})
	c.Close()
	if _, err := c.WriteVec([][]byte{[]byte("x")}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteVec after Close: %v, want net.ErrClosed", err)
	}
}

func TestWriteVecPeerReset(t *testing.T) {
	client, server := tcpPair(t)
	c := Wrap(client, false).(*VecConn)
	server.SetLinger(0)
	server.Close()
	time.Sleep(10 * time.Millisecond)
	buf := make([]byte, 64<<10)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.WriteVec([][]byte{buf})
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("WriteVec to a reset peer: %v, want ECONNRESET or EPIPE", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "writev" {
		t.Fatalf("error %#v is not a *net.OpError with op writev", err)
	}
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	client, server := tcpPair(t)

	t.Run("ReadReady", func(t *testing.T) {
		c := Wrap(server, true).(*Conn)
		pool := bufpool.New(nil)
		const size, runs = 256, 100
		if _, err := client.Write(make([]byte, size*(runs+10))); err != nil {
			t.Fatal(err)
		}
		server.SetReadDeadline(time.Now().Add(5 * time.Second))
		var rerr error
		allocs := testing.AllocsPerRun(runs, func() {
			b, err := c.ReadReady(pool, size)
			if err != nil {
				rerr = err
				return
			}
			b.Free()
		})
		if rerr != nil {
			t.Fatal(rerr)
		}
		if allocs != 0 {
			t.Fatalf("ReadReady with data waiting: %v allocs per call, want 0", allocs)
		}
	})

	t.Run("WriteVec", func(t *testing.T) {
		done := make(chan struct{})
		go func() { // drains without allocating
			defer close(done)
			buf := make([]byte, 64<<10)
			for {
				if _, err := server.Read(buf); err != nil {
					return
				}
			}
		}()
		bufs := make([][]byte, 8)
		for i := range bufs {
			bufs[i] = make([]byte, 1024)
		}
		for _, pooled := range []bool{true, false} {
			vw := Wrap(client, pooled).(vectorWriter)
			var werr error
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := vw.WriteVec(bufs); err != nil {
					werr = err
				}
			})
			if werr != nil {
				t.Fatal(werr)
			}
			if allocs != 0 {
				t.Fatalf("WriteVec (pooled %v): %v allocs per call, want 0", pooled, allocs)
			}
		}
		client.Close()
		<-done
	})
}

// TestHappensBefore checks that the race detector sees a write to memory
// before WriteVec as happening before a ReadReady that receives the bytes,
// as it does for net.Conn's Write and Read: end-to-end tests with client and
// server in one process rely on it.
func TestHappensBefore(t *testing.T) {
	client, server := tcpPair(t)
	w := Wrap(client, true).(*Conn)
	r := Wrap(server, true).(*Conn)
	pool := bufpool.New(nil)
	shared := make([]int, 1)
	done := make(chan int)
	go func() {
		b, err := r.ReadReady(pool, 16)
		if err == nil {
			b.Free()
		}
		done <- shared[0]
	}()
	shared[0] = 42
	if _, err := w.WriteVec([][]byte{[]byte("go")}); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != 42 {
		t.Fatalf("reader saw %d, want 42", got)
	}
}

// An idle connection holds a Conn and nothing of its calls: the state of
// a ReadReady or WriteVec in progress lives in pooled call structs.
func TestConnSize(t *testing.T) {
	if n := unsafe.Sizeof(Conn{}); n > 64 {
		t.Fatalf("Conn is %d bytes, want at most 64", n)
	}
}

// Write sends one slice with send(2): raw for up to maxRawLen, through the
// runtime above. A 3 MiB slice against small socket buffers goes out in
// many partial sends, large then small, parking on a full send buffer,
// and arrives whole and in order.
func TestWriteOneSlicePartial(t *testing.T) {
	client, server := tcpPair(t)
	client.SetWriteBuffer(16 << 10)
	server.SetReadBuffer(16 << 10)
	for _, pooled := range []bool{true, false} {
		w := Wrap(client, pooled)
		want := make([]byte, 3<<20)
		for i := range want {
			want[i] = byte(i * 7 >> 3)
		}
		got := slowRead(server, len(want))
		client.SetWriteDeadline(time.Now().Add(20 * time.Second))
		parks := writeParks.Load()
		n, err := w.Write(want)
		if err != nil || n != len(want) {
			t.Fatalf("pooled %v: Write = %d, %v; want %d, nil", pooled, n, err, len(want))
		}
		if g := <-got; !bytes.Equal(g, want) {
			t.Fatalf("pooled %v: peer read %d bytes that differ from the %d written", pooled, len(g), len(want))
		}
		if writeParks.Load() == parks {
			t.Errorf("pooled %v: Write never parked on a full send buffer", pooled)
		}
	}
	// A write to a conn whose peer is gone fails as net's conns fail.
	server.Close()
	w := Wrap(client, true)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = w.Write(make([]byte, 64<<10))
		time.Sleep(time.Millisecond)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("write after the peer closed: %v, want a *net.OpError for write", err)
	}
}

// slowRead reads n bytes from c on a goroutine, in small reads with
// pauses, so that a writer finds the send buffer full and parks; it sends
// what it read (less on an error) on the channel it returns.
func slowRead(c net.Conn, n int) <-chan []byte {
	got := make(chan []byte, 1)
	go func() {
		out := make([]byte, 0, n)
		buf := make([]byte, 32<<10)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		for i := 0; len(out) < n; i++ {
			m, err := c.Read(buf)
			if err != nil {
				break
			}
			out = append(out, buf[:m]...)
			if i%64 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		got <- out
	}()
	return got
}
