package h2frame

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// TestWriterSmallBatches checks the write buffer tiers: batches that stay in
// a small buffer and those that move on to pooled buffers all reach the sink in one contiguous write with the same bytes as frames
// encoded one by one, and no Writer keeps a small or pooled buffer after the
// Flush.
func TestWriterSmallBatches(t *testing.T) {
	for _, sizes := range [][]int{
		{0},             // a SETTINGS ack alone
		{100},           // small
		{50, 50, 50},    // small
		{100, 800},      // small, filled to the brim
		{100, 500, 500}, // small, then a pooled buffer
		{2000},          // pooled at once
		{900, 900, 900},
		{smallWriteBufferSize},
	} {
		pool := bufpool.New(nil)
		sink := &vecSink{}
		w := NewWriter(sink, WriterConfig{Pool: pool})
		var want bytes.Buffer
		for i, n := range sizes {
			p := bytes.Repeat([]byte{byte('a' + i)}, n)
			if n == 0 {
				w.WriteSettingsAck()
				want.Write(frameBytes(TypeSettings, FlagAck, 0, nil))
				continue
			}
			w.WriteData(1, false, p)
			want.Write(frameBytes(TypeData, 0, 1, p))
		}
		if w.Buffered() != want.Len() {
			t.Errorf("%v: Buffered = %d, want %d", sizes, w.Buffered(), want.Len())
		}
		if err := w.Flush(); err != nil {
			t.Fatalf("%v: Flush = %v", sizes, err)
		}
		if !bytes.Equal(sink.Bytes(), want.Bytes()) {
			t.Errorf("%v: wrote %d bytes, not the %d expected", sizes, sink.Len(), want.Len())
		}
		if total := want.Len(); total <= smallWriteBufferSize && sink.writes+sink.vecs != 1 {
			t.Errorf("%v: %d writes and %d writevs for %d bytes, want one write", sizes, sink.writes, sink.vecs, total)
		}
		if w.b != nil || pool.Outstanding() != 0 {
			t.Errorf("%v: after Flush: batch held %v, outstanding %d", sizes, w.b != nil, pool.Outstanding())
		}
		w.WritePing(false, [8]byte{1})
		w.Close()
		if w.b != nil || w.Buffered() != 0 || pool.Outstanding() != 0 {
			t.Errorf("%v: after Close: batch held %v, buffered %d, outstanding %d", sizes, w.b != nil, w.Buffered(), pool.Outstanding())
		}
	}
}

// TestWriterSmallBatchAllocs checks that small batches cost no allocation in
// steady state, the small buffer coming back from its sync.Pool.
func TestWriterSmallBatchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	w := NewWriter(&discardVec{}, WriterConfig{})
	defer w.Close()
	p := make([]byte, 300)
	run := func() {
		w.WriteData(1, false, p[:100])
		w.WriteData(1, false, p)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Errorf("small batch: %v allocs per Flush, want 0", n)
	}
}

// TestReaderShedsScratchWhenIdle checks that a pooled-mode Reader waiting
// for bytes holds neither its scratch slices nor the HPACK decoder's, and
// that frames read after a shed are whole.
func TestReaderShedsScratchWhenIdle(t *testing.T) {
	needHPACK(t)
	var wire bytes.Buffer
	w := NewWriter(&wire, WriterConfig{})
	// One frame per NextBuffer: each ReadFrame finds nothing buffered.
	src := &chunkReady{}
	for range 2 {
		for _, write := range []func(){
			func() { w.WriteHeaders(1, false, grpcRequest) },
			func() {
				w.WriteSettings(Setting{SettingInitialWindowSize, 1 << 20}, Setting{SettingMaxFrameSize, 1 << 20})
			},
			func() { w.WriteGoAway(1, ErrCodeNo, []byte("bye")) },
		} {
			write()
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			src.chunks = append(src.chunks, bytes.Clone(wire.Bytes()))
			wire.Reset()
		}
	}
	pool := bufpool.New(nil)
	r := NewReader(src, ReaderConfig{Pool: pool})
	src.r = r
	defer r.Close()
	for i := range 2 {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := f.(*HeadersFrame); !ok || !slices.Equal(h.Fields, grpcRequest) {
			t.Fatalf("round %d: got %v, want the request headers", i, f)
		}
		f, err = r.ReadFrame()
		if s, ok := f.(*SettingsFrame); err != nil || !ok || len(s.Settings) != 2 || s.Settings[1].Val != 1<<20 {
			t.Fatalf("round %d: got %v, %v, want the SETTINGS", i, f, err)
		}
		f, err = r.ReadFrame()
		if g, ok := f.(*GoAwayFrame); err != nil || !ok || string(g.Debug) != "bye" {
			t.Fatalf("round %d: got %v, %v, want the GOAWAY", i, f, err)
		}
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("at the end: %v, want EOF", err)
	}
	if r.frames != nil || r.HoldsReadBuffer() {
		t.Errorf("idle Reader holds scratch: frames %v, read buffer %v", r.frames != nil, r.HoldsReadBuffer())
	}
	if pool.Outstanding() != 0 {
		t.Errorf("pool outstanding %d", pool.Outstanding())
	}
	if src.waits != 7 || src.idleScratch != src.waits {
		t.Errorf("the Reader held scratch space in %d of %d waits (want 7), want none", src.waits-src.idleScratch, src.waits)
	}
}

// TestReaderKeepsFramesInsideBlock checks that a Reader waiting for the
// CONTINUATION of an open header block keeps the block's first frame (it
// sheds its frames only between blocks), and that an idle Reader is small.
func TestReaderKeepsFramesInsideBlock(t *testing.T) {
	needHPACK(t)
	var wire bytes.Buffer
	w := NewWriter(&wire, WriterConfig{})
	w.WriteHeaders(1, false, grpcRequest)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	block := wire.Bytes()[HeaderLen:]
	// HEADERS with a priority and the first byte of the block, then
	// CONTINUATION with the rest, each in its own NextBuffer; another
	// Reader takes frames from the pool in between.
	prio := []byte{0, 0, 0, 3, 7}
	src := &chunkReady{chunks: [][]byte{
		frameBytes(TypeHeaders, FlagPriority, 5, append(prio, block[0])),
		frameBytes(TypeContinuation, FlagEndHeaders, 5, block[1:]),
	}}
	pool := bufpool.New(nil)
	r := NewReader(src, ReaderConfig{Pool: pool})
	src.r = r
	src.onWait = func() {
		fr := framesPool.Get().(*frames)
		fr.hf = HeadersFrame{} // a pool that handed out r's frames would show here
		framesPool.Put(fr)
	}
	defer r.Close()
	f, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	h, ok := f.(*HeadersFrame)
	if !ok || h.StreamID != 5 || !h.HasPriority || h.Priority.StreamDep != 3 || h.Priority.Weight != 7 || !slices.Equal(h.Fields, grpcRequest) {
		t.Fatalf("got %v, want HEADERS on stream 5 with priority 3/7 and the request fields", f)
	}
	if src.waits != 2 || src.idleScratch != 1 {
		t.Errorf("%d waits, %d without frames; want 2 and 1 (the first only)", src.waits, src.idleScratch)
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("at the end: %v, want EOF", err)
	}
	if r.frames != nil {
		t.Error("idle Reader holds its frames")
	}
	if sz := unsafe.Sizeof(Writer{}); sz > 48 {
		t.Errorf("Writer is %d bytes, want at most 48 (what an idle connection holds)", sz)
	}
	if sz := unsafe.Sizeof(*r); sz > 112 {
		t.Errorf("Reader is %d bytes, want at most 112 (what an idle connection holds)", sz)
	}
}

// chunkReady is a BufferSource handing out one chunk per NextBuffer. It
// records how often it found its Reader without scratch space.
type chunkReady struct {
	chunks      [][]byte
	r           *Reader
	waits       int
	idleScratch int
	onWait      func() // called by each NextBuffer, if set
}

func (c *chunkReady) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func (c *chunkReady) NextBuffer(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	c.waits++
	if c.onWait != nil {
		c.onWait()
	}
	if c.r != nil && c.r.frames == nil {
		c.idleScratch++
	}
	if len(c.chunks) == 0 {
		return nil, io.EOF
	}
	b := pool.Copy(c.chunks[0])
	c.chunks = c.chunks[1:]
	return b, nil
}

// readyChunks is a BufferSource over chunks, where a nil chunk means
// "nothing there yet": NextBuffer says ErrWouldBlock for it. It records
// how the Reader read.
type readyChunks struct {
	chunks       [][]byte
	waits, nexts int
}

// Read is the blocking read the Reader uses to complete a frame.
func (c *readyChunks) Read(p []byte) (int, error) {
	c.waits++
	for len(c.chunks) > 0 && c.chunks[0] == nil {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if n == len(c.chunks[0]) {
		c.chunks = c.chunks[1:]
	} else {
		c.chunks[0] = c.chunks[0][n:]
	}
	return n, nil
}

func (c *readyChunks) NextBuffer(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	c.nexts++
	if len(c.chunks) == 0 {
		return nil, io.EOF
	}
	ch := c.chunks[0]
	c.chunks = c.chunks[1:]
	if ch == nil {
		return nil, ErrWouldBlock
	}
	return pool.Copy(ch), nil
}

// readPings reads r to its end and returns what each ReadFrame gave:
// "block" for ErrWouldBlock, after checking that the Reader then holds no
// read buffer, scratch or pooled buffer (and calling onBlock, if not nil,
// for checks of the caller's), or "PING" for a PING carrying "12345678".
func readPings(t *testing.T, r *Reader, pool *bufpool.Pool, onBlock func()) string {
	t.Helper()
	var got []string
	for {
		f, err := r.ReadFrame()
		if err == io.EOF {
			return strings.Join(got, " ")
		}
		switch {
		case err == ErrWouldBlock:
			got = append(got, "block")
			if r.HoldsReadBuffer() || r.frames != nil || pool.Outstanding() != 0 {
				t.Errorf("gave up holding a read buffer %v, scratch %v, outstanding %d", r.HoldsReadBuffer(), r.frames != nil, pool.Outstanding())
			}
			if onBlock != nil {
				onBlock()
			}
		case err != nil:
			t.Fatal(err)
		default:
			pf, ok := f.(*PingFrame)
			if !ok || string(pf.Data[:]) != "12345678" {
				t.Fatalf("read %v, want the PING", f)
			}
			got = append(got, f.Header().Type.String())
		}
	}
}

// TestSourceWouldBlock checks that ReadFrame returns the source's
// ErrWouldBlock, holding nothing then, and goes on at the next call.
func TestSourceWouldBlock(t *testing.T) {
	ping := frameBytes(TypePing, 0, 0, []byte("12345678"))
	src := &readyChunks{chunks: [][]byte{nil, ping, nil, nil, ping}}
	pool := bufpool.New(nil)
	r := NewReader(src, ReaderConfig{Pool: pool})
	if g, want := readPings(t, r, pool, nil), "block PING block block PING"; g != want {
		t.Errorf("read %q, want %q", g, want)
	}
	r.Close()
}
