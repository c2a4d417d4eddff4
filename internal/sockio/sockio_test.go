package sockio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// readySource repeats the method set h2conn's reader needs of a socket
// (its readySocket, without the bounded wait), and vectorWriter h2frame's
// VectorWriter, so that the tests check sockio satisfies them without
// importing either.
type readySource interface {
	io.Reader
	ReadReady(pool *bufpool.Pool, size int) (*bufpool.Buffer, error)
}

type vectorWriter interface {
	WriteVec(bufs [][]byte) (int64, error)
}

var _ vectorWriter = (*FallbackConn)(nil)

func TestPooledReadsDefault(t *testing.T) {
	const env = "LEANGRPC_READ_BUFFER_POOLING"
	for _, tc := range []struct {
		val  string
		set  bool
		want bool
	}{
		{set: false, want: true},
		{val: "false", set: true, want: false},
		{val: "0", set: true, want: false},
		{val: "FALSE", set: true, want: false},
		{val: "true", set: true, want: true},
		{val: "1", set: true, want: true},
		{val: "bogus", set: true, want: true},
		{val: "", set: true, want: true},
	} {
		t.Setenv(env, tc.val) // restores the original value after the test
		if !tc.set {
			os.Unsetenv(env)
		}
		if got := PooledReadsDefault(); got != tc.want {
			t.Errorf("%s=%q (set %v): PooledReadsDefault() = %v, want %v", env, tc.val, tc.set, got, tc.want)
		}
	}
}

// pattern returns n bytes of a sequence that does not repeat with any short
// period, starting at offset off of the stream.
func pattern(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		x := uint32(off + i)
		b[i] = byte(x*2654435761>>24) ^ byte(x)
	}
	return b
}

// slices cuts a stream of pattern bytes into slices of the given sizes.
func slices(sizes []int) ([][]byte, []byte) {
	var all []byte
	bufs := make([][]byte, len(sizes))
	off := 0
	for i, n := range sizes {
		bufs[i] = pattern(off, n)
		all = append(all, bufs[i]...)
		off += n
	}
	return bufs, all
}

func TestFallbackPipe(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()

	w := Wrap(a, true)
	if _, ok := w.(*FallbackConn); !ok {
		t.Fatalf("Wrap(net.Pipe) = %T, want *FallbackConn", w)
	}
	if _, ok := w.(readySource); ok {
		t.Fatal("Wrap(net.Pipe) implements ReadReady; a pipe has no descriptor to wait on")
	}
	vw, ok := w.(vectorWriter)
	if !ok {
		t.Fatal("Wrap(net.Pipe) does not implement WriteVec")
	}

	sizes := []int{0, 1, 5, 0, 4096, 100, 70000, 0, 3}
	bufs, want := slices(sizes)
	orig := make([][]byte, len(bufs))
	copy(orig, bufs)

	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(want))
		_, err := io.ReadFull(b, buf)
		if err != nil {
			buf = nil
		}
		got <- buf
	}()
	for round := 0; round < 2; round++ {
		n, err := vw.WriteVec(bufs)
		if err != nil || n != int64(len(want)) {
			t.Fatalf("WriteVec = %d, %v; want %d, nil", n, err, len(want))
		}
		if g := <-got; !bytes.Equal(g, want) {
			t.Fatalf("round %d: peer read %d bytes that differ from the %d written", round, len(g), len(want))
		}
		for i := range bufs {
			if len(bufs[i]) != len(orig[i]) || (len(bufs[i]) > 0 && &bufs[i][0] != &orig[i][0]) {
				t.Fatalf("WriteVec changed the caller's slice %d", i)
			}
		}
		if round == 0 {
			go func() {
				buf := make([]byte, len(want))
				if _, err := io.ReadFull(b, buf); err != nil {
					buf = nil
				}
				got <- buf
			}()
		}
	}

	b.Close()
	if _, err := vw.WriteVec([][]byte{[]byte("x")}); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("WriteVec after the peer closed: %v, want io.ErrClosedPipe", err)
	}
}

func TestWrapRewrapsOriginal(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := Wrap(Wrap(a, true), false)
	fc, ok := w.(*FallbackConn)
	if !ok || fc.NetConn() != a {
		t.Fatalf("Wrap(Wrap(pipe)) = %T wrapping %v, want *FallbackConn over the pipe", w, fc)
	}
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		c.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() { c.Close(); r.c.Close() })
	return c.(*net.TCPConn), r.c.(*net.TCPConn)
}

func TestWrapTCPHasWriteVec(t *testing.T) {
	c, s := tcpPair(t)
	for _, pooled := range []bool{true, false} {
		w := Wrap(c, pooled)
		vw, ok := w.(vectorWriter)
		if !ok {
			t.Fatalf("Wrap(tcp, %v) = %T without WriteVec", pooled, w)
		}
		msg := [][]byte{[]byte("hello, "), nil, []byte("world")}
		if n, err := vw.WriteVec(msg); err != nil || n != 12 {
			t.Fatalf("WriteVec = %d, %v", n, err)
		}
		got := make([]byte, 12)
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(s, got); err != nil || string(got) != "hello, world" {
			t.Fatalf("peer read %q, %v", got, err)
		}
		if w.LocalAddr().String() != c.LocalAddr().String() {
			t.Fatalf("wrapped LocalAddr %v, want %v", w.LocalAddr(), c.LocalAddr())
		}
	}
}

func TestSetNoDelay(t *testing.T) {
	c, _ := tcpPair(t)
	if err := SetNoDelay(Wrap(c, true), false); err != nil {
		t.Fatalf("SetNoDelay(tcp): %v", err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if err := SetNoDelay(a, true); err != nil {
		t.Fatalf("SetNoDelay(pipe) = %v, want nil (no-op)", err)
	}
}

// writeRecorder is a conn without writev that records each Write.
type writeRecorder struct {
	net.Conn // nil: only Write is called
	writes   [][]byte
}

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// A conn without writev (TLS, a pipe) gets a batch's slices joined into
// writes of up to a TLS record's plaintext, not a Write per slice, and the
// rest of a large slice as it is; the bytes and their order are kept.
func TestFallbackJoinsSlices(t *testing.T) {
	small := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	cases := []struct {
		name   string
		bufs   [][]byte
		writes []int // the length of each Write
	}{
		{"frames of a batch", [][]byte{small('a', 9), small('b', 100), small('c', 9), small('d', 200)}, []int{318}},
		{"header, large payload, header", [][]byte{small('h', 9), small('p', 40<<10), small('i', 9)}, []int{joinedWrite, 40<<10 - (joinedWrite - 9), 9}},
		{"large payload first", [][]byte{small('p', 20<<10), small('h', 9)}, []int{20 << 10, 9}},
		{"small slices past a record", [][]byte{small('x', 10<<10), small('y', 10<<10)}, []int{joinedWrite, 20<<10 - joinedWrite}},
	}
	base := bufpool.Default().Outstanding()
	for _, tc := range cases {
		rec := &writeRecorder{}
		fc := &FallbackConn{Conn: rec}
		n, err := fc.WriteVec(tc.bufs)
		want := bytes.Join(tc.bufs, nil)
		if err != nil || n != int64(len(want)) {
			t.Fatalf("%s: WriteVec = %d, %v; want %d", tc.name, n, err, len(want))
		}
		if got := bytes.Join(rec.writes, nil); !bytes.Equal(got, want) {
			t.Fatalf("%s: the bytes written differ from the slices", tc.name)
		}
		var lens []int
		for _, w := range rec.writes {
			lens = append(lens, len(w))
		}
		if fmt.Sprint(lens) != fmt.Sprint(tc.writes) {
			t.Errorf("%s: writes of %v bytes, want %v", tc.name, lens, tc.writes)
		}
	}
	if out := bufpool.Default().Outstanding(); out != base {
		t.Errorf("%d pooled buffers out after the writes, want %d", out, base)
	}
	// A TCP conn keeps its writev (a zero TCPConn has no descriptor, so
	// every platform gives it the FallbackConn).
	if f, ok := Wrap(new(net.TCPConn), false).(*FallbackConn); !ok || !f.vec {
		t.Errorf("Wrap(TCPConn without a descriptor) = %#v, want a FallbackConn that writes with writev", f)
	}
}
