package h2frame

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// hpackReady reports whether internal/hpack is implemented yet (its stub
// panics); HPACK-dependent tests skip until it is.
func hpackReady() (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	hpack.NewEncoder().BeginBlock(nil)
	return true
}

func needHPACK(t testing.TB) {
	t.Helper()
	if !hpackReady() {
		t.Skip("internal/hpack not implemented yet")
	}
}

// chopReader returns at most max bytes per Read (1 for byte-at-a-time), or
// a random count in [1, max] when rnd is set.
type chopReader struct {
	data []byte
	max  int
	rnd  *rand.Rand
}

func (c *chopReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), c.max)
	if c.rnd != nil {
		n = 1 + c.rnd.IntN(n)
	}
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// fakeReady is a BufferSource over a byte slice, delivering chunks of at
// most max bytes, that records how many buffers it handed out.
type fakeReady struct {
	chopReader
	readies int
}

func (f *fakeReady) NextBuffer(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	if len(f.data) == 0 {
		return nil, io.EOF
	}
	b := pool.Get(size)
	n, _ := f.Read(b.Bytes())
	b.SetLen(n)
	f.readies++
	return b, nil
}

// vecSink is a VectorWriter collecting bytes, counting calls.
type vecSink struct {
	bytes.Buffer
	vecs, writes int
}

func (v *vecSink) WriteVec(bufs [][]byte) (int64, error) {
	v.vecs++
	var n int64
	for _, b := range bufs {
		m, _ := v.Buffer.Write(b)
		n += int64(m)
	}
	return n, nil
}

func (v *vecSink) Write(p []byte) (int, error) {
	v.writes++
	return v.Buffer.Write(p)
}

// discardSink counts bytes and drops them.
type discardSink struct{ n int64 }

func (d *discardSink) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }

type discardVec struct{ n int64 }

func (d *discardVec) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }
func (d *discardVec) WriteVec(bufs [][]byte) (int64, error) {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	d.n += n
	return n, nil
}

// frameBytes encodes one raw frame.
func frameBytes(t Type, f Flags, stream uint32, payload []byte) []byte {
	n := len(payload)
	b := []byte{byte(n >> 16), byte(n >> 8), byte(n), byte(t), byte(f), byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream)}
	return append(b, payload...)
}
