package h2frame

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// mixedWire returns a stream exercising every read path: DATA of every
// size class (in the read buffer, refilled, read directly, padded), control
// frames, frames larger than the read buffer, skipped unknown frames and
// header blocks split into CONTINUATIONs. It also returns the DATA
// payloads in order.
func mixedWire(t testing.TB) ([]byte, [][]byte) {
	rnd := rand.New(rand.NewPCG(7, 7))
	var wire bytes.Buffer
	var payloads [][]byte
	data := func(n int, pad int) {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rnd.Uint32())
		}
		if n > 0 {
			payloads = append(payloads, p)
		}
		if pad >= 0 {
			wire.Write(frameBytes(TypeData, FlagPadded, 1, cat([]byte{byte(pad)}, p, make([]byte, pad))))
		} else {
			wire.Write(frameBytes(TypeData, 0, 1, p))
		}
	}
	for _, n := range []int{0, 1, 100, 4000, 4096, 4097, 10000, 16384, 16393, 70000, 300000} {
		data(n, -1)
		data(n, 0)
		data(n, 200)
		wire.Write(pingWire)
	}
	wire.Write(frameBytes(TypeGoAway, 0, 0, make([]byte, 50000)))
	wire.Write(frameBytes(0x42, 0, 0, make([]byte, 50000)))
	wire.Write(frameBytes(TypeSettings, 0, 0, settingBytes(SettingMaxFrameSize, 1<<20)))
	if hpackReady() {
		w := NewWriter(&wire, WriterConfig{})
		w.WriteHeaders(1, false, bigFields(20))
		w.SetPeerMaxFrameSize(1 << 20)
		w.WriteHeaders(3, false, bigFields(100))
		w.WriteHeaders(5, true, grpcRequest)
		w.Flush()
	}
	for range 50 {
		data(rnd.IntN(20000), -1)
	}
	return wire.Bytes(), payloads
}

// TestPoolBalance reads the mixed stream over every kind of source and
// checks after each frame that the pool holds exactly the DATA buffers the
// test keeps plus what the Reader holds, that a pooled Reader with nothing
// buffered holds no read buffer, and that everything balances at the end.
func TestPoolBalance(t *testing.T) {
	wire, payloads := mixedWire(t)
	for _, rc := range readerCases(wire) {
		for _, noPool := range []bool{false, true} {
			name := rc.name
			if noPool {
				name += "/NoPooledReads"
			}
			t.Run(name, func(t *testing.T) {
				pool := bufpool.New(nil)
				src := rc.src()
				r := NewReader(src, ReaderConfig{Pool: pool, MaxFrameSize: 1 << 20, NoPooledReads: noPool})
				var held []*bufpool.Buffer
				for {
					f, err := r.ReadFrame()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					if d, ok := f.(*DataFrame); ok && d.Data != nil {
						held = append(held, d.Data)
					}
					if r.tmp != nil || r.block != nil {
						t.Fatalf("after %v: reader keeps a frame or block buffer", f.Header())
					}
					own := 0
					if r.rbuf != nil {
						own = 1
					}
					if got := pool.Outstanding(); got != int64(len(held)+own) {
						t.Fatalf("after %v: outstanding %d, want %d held + %d reader", f.Header(), got, len(held), own)
					}
					if rc.pooled && !noPool && r.Buffered() == 0 && r.HoldsReadBuffer() {
						t.Fatalf("after %v: idle pooled reader holds a read buffer", f.Header())
					}
				}
				if len(held) != len(payloads) {
					t.Fatalf("%d DATA buffers, want %d", len(held), len(payloads))
				}
				for i, b := range held {
					if !bytes.Equal(b.Bytes(), payloads[i]) {
						t.Fatalf("payload %d (%d bytes) differs", i, len(payloads[i]))
					}
				}
				if rc.pooled && !noPool && r.HoldsReadBuffer() {
					t.Error("pooled reader holds a read buffer at EOF")
				}
				if fr, ok := src.(*fakeReady); ok {
					if noPool && fr.readies != 0 {
						t.Errorf("NoPooledReads: %d NextBuffer calls", fr.readies)
					}
					if !noPool && fr.readies == 0 {
						t.Error("pooled: NextBuffer never called")
					}
				}
				r.Close()
				want := int64(len(held))
				if got := pool.Outstanding(); got != want {
					t.Errorf("after Close: outstanding %d, want %d", got, want)
				}
				for _, b := range held {
					b.Free()
				}
				if got := pool.Outstanding(); got != 0 {
					t.Errorf("after freeing: outstanding %d", got)
				}
			})
		}
	}
}

// spyReader records the size of every Read.
type spyReader struct {
	io.Reader
	sizes []int
}

func (s *spyReader) Read(p []byte) (int, error) {
	s.sizes = append(s.sizes, len(p))
	return s.Reader.Read(p)
}

// TestLargeDataReadDirect checks that a large DATA payload is read straight
// into its buffer, not through the read buffer, and that a small one still
// arrives whole with the frames behind it in the same read.
func TestLargeDataReadDirect(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789"), 10000)
	wire := cat(frameBytes(TypeData, 0, 1, payload), pingWire)
	spy := &spyReader{Reader: &chopReader{data: wire, max: 8192}}
	r := NewReader(spy, ReaderConfig{MaxFrameSize: 1 << 20})
	defer r.Close()
	f, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	d := f.(*DataFrame)
	if !bytes.Equal(d.Data.Bytes(), payload) {
		t.Fatal("payload differs")
	}
	d.Data.Free()
	direct := 0
	for _, n := range spy.sizes {
		if n > defaultReadBufferSize {
			direct++
		}
	}
	if direct == 0 {
		t.Fatalf("no read went straight into the payload buffer: read sizes %v", spy.sizes)
	}
	if f, err := r.ReadFrame(); err != nil || f.Header().Type != TypePing {
		t.Fatalf("%v %v", f, err)
	}

	// Many small frames: one read brings them all.
	var small bytes.Buffer
	for range 50 {
		small.Write(frameBytes(TypeData, 0, 1, make([]byte, 100)))
	}
	spy = &spyReader{Reader: bytes.NewReader(small.Bytes())}
	r2 := NewReader(spy, ReaderConfig{})
	defer r2.Close()
	for range 50 {
		f, err := r2.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		f.(*DataFrame).Data.Free()
	}
	if len(spy.sizes) != 1 {
		t.Fatalf("%d reads for 50 small frames in one buffer, want 1", len(spy.sizes))
	}
}

// alignedReady is a BufferSource delivering one chunk per NextBuffer; its
// plain Read must never be needed because chunks end on frame boundaries.
type alignedReady struct {
	t      *testing.T
	chunks [][]byte
}

func (a *alignedReady) Read(p []byte) (int, error) {
	a.t.Error("Read called: the Reader kept a buffer across a frame boundary")
	return 0, io.ErrUnexpectedEOF
}

func (a *alignedReady) NextBuffer(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	if len(a.chunks) == 0 {
		return nil, io.EOF
	}
	c := a.chunks[0]
	a.chunks = a.chunks[1:]
	b := pool.Get(size)
	b.SetLen(copy(b.Bytes(), c))
	return b, nil
}

// TestPooledIdleBetweenFrames checks that a pooled Reader takes a fresh
// buffer through NextBuffer for every chunk that starts on a frame boundary,
// also between a HEADERS frame and its CONTINUATIONs: it never waits on the
// source while holding a read buffer.
func TestPooledIdleBetweenFrames(t *testing.T) {
	needHPACK(t)
	block := encodeBlock(":path", "/a", "x-long", strings.Repeat("z", 300))
	chunks := [][]byte{
		cat(frameBytes(TypeData, 0, 1, []byte("abc")), pingWire),
		frameBytes(TypeHeaders, 0, 1, block[:10]),
		frameBytes(TypeContinuation, 0, 1, block[10:20]),
		frameBytes(TypeContinuation, FlagEndHeaders, 1, block[20:]),
		frameBytes(TypeData, 0, 1, make([]byte, 16384)),
	}
	pool := bufpool.New(nil)
	r := NewReader(&alignedReady{t: t, chunks: chunks}, ReaderConfig{Pool: pool})
	defer r.Close()
	for _, want := range []Type{TypeData, TypePing, TypeHeaders, TypeData} {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if f.Header().Type != want {
			t.Fatalf("got %v, want %v", f.Header(), want)
		}
		if d, ok := f.(*DataFrame); ok {
			d.Data.Free()
		}
		if h, ok := f.(*HeadersFrame); ok && (len(h.Fields) != 2 || h.Fields[1].Value != strings.Repeat("z", 300)) {
			t.Fatalf("fields %v", h.Fields)
		}
		if r.Buffered() == 0 && (r.HoldsReadBuffer() || pool.Outstanding() != 0) {
			t.Fatalf("after %v: holds buffer %v, outstanding %d", f.Header(), r.HoldsReadBuffer(), pool.Outstanding())
		}
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatal(err)
	}
}
