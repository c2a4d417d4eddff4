package h2frame

import (
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// headerChunks is readyChunks that is also a HeaderSource: a nil chunk met
// inside a frame header makes ReadHeaderRest keep the header's first bytes
// and say ErrWouldBlock; the next NextBuffer gives them back in front of
// its bytes.
type headerChunks struct {
	readyChunks
	kept  []byte
	parks []int // len(begun) at each park
}

func (c *headerChunks) ReadHeaderRest(begun, p []byte) (int, error) {
	if len(c.chunks) > 0 && c.chunks[0] == nil {
		c.chunks = c.chunks[1:]
		c.kept = append([]byte(nil), begun...)
		c.parks = append(c.parks, len(begun))
		return 0, ErrWouldBlock
	}
	return c.readyChunks.Read(p)
}

func (c *headerChunks) NextBuffer(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	b, err := c.readyChunks.NextBuffer(pool, size)
	if c.kept == nil || err != nil {
		return b, err
	}
	nb := pool.Get(size)
	nb.SetLen(copy(nb.Bytes(), c.kept) + copy(nb.Bytes()[len(c.kept):], b.Bytes()))
	b.Free()
	c.kept = nil
	return nb, nil
}

// TestHeaderSourceParksInsideHeader checks that a Reader over a
// HeaderSource that gives up inside a frame header says ErrWouldBlock
// holding no read buffer and no scratch, having handed the header's first
// bytes to the source, and parses the frame once the rest comes.
func TestHeaderSourceParksInsideHeader(t *testing.T) {
	ping := frameBytes(TypePing, 0, 0, []byte("12345678"))
	src := &headerChunks{readyChunks: readyChunks{chunks: [][]byte{
		ping[:3], nil, // a header's first 3 bytes, then nothing
		ping[3:5], nil, // 2 more, then nothing
		nil, // a wake-up that brings nothing
		append(ping[5:len(ping):len(ping)], ping[:8]...), // the frame, and 8 bytes of the next header
		nil,
		ping[8:],
	}}}
	pool := bufpool.New(nil)
	r := NewReader(src, ReaderConfig{Pool: pool})
	got := readPings(t, r, pool, func() {
		if r.Buffered() != 0 {
			t.Errorf("Buffered = %d while the source keeps the header's bytes", r.Buffered())
		}
	})
	if want := "block block block PING block PING"; got != want {
		t.Errorf("read %q, want %q", got, want)
	}
	if g, want := src.parks, []int{3, 5, 8}; len(g) != len(want) || g[0] != want[0] || g[1] != want[1] || g[2] != want[2] {
		t.Errorf("parked with %v header bytes, want %v", g, want)
	}
	r.Close()
	if pool.Outstanding() != 0 {
		t.Errorf("%d buffers outstanding after Close", pool.Outstanding())
	}
}

// TestHeaderSourceNotInsidePayload checks that a HeaderSource is asked to
// wait only inside a header: the rest of a payload is read with Read.
func TestHeaderSourceNotInsidePayload(t *testing.T) {
	ping := frameBytes(TypePing, 0, 0, []byte("12345678"))
	src := &headerChunks{readyChunks: readyChunks{chunks: [][]byte{ping[:12], ping[12:]}}}
	pool := bufpool.New(nil)
	r := NewReader(src, ReaderConfig{Pool: pool})
	if f, err := r.ReadFrame(); err != nil || f.Header().Type != TypePing {
		t.Fatalf("ReadFrame = %v, %v; want the PING", f, err)
	}
	if src.waits != 1 || len(src.parks) != 0 {
		t.Errorf("the payload's rest: %d reads, %d parks; want 1 read, no park", src.waits, len(src.parks))
	}
	r.Close()
}
