package h2frame

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

func TestWholeFrames(t *testing.T) {
	ping := frameBytes(TypePing, 0, 0, make([]byte, 8))
	data := frameBytes(TypeData, 0, 1, []byte("hello"))
	for _, tc := range []struct {
		name string
		p    []byte
		want bool
	}{
		{"empty", nil, true},
		{"one", ping, true},
		{"two", cat(ping, data), true},
		{"empty payload", frameBytes(TypeSettings, FlagAck, 0, nil), true},
		{"short header", ping[:5], false},
		{"short payload", data[:len(data)-1], false},
		{"one and a header", cat(ping, data[:HeaderLen]), false},
		{"one and a byte", cat(ping, data[:1]), false},
	} {
		if got := WholeFrames(tc.p); got != tc.want {
			t.Errorf("%s: WholeFrames = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// fedSource is a BufferSource that gives only the buffers handed to it
// (give), as h2conn's reader does with the bytes of a ReadEach: ErrWouldBlock
// when it holds none, and errMidFrame when the Reader reads to complete a
// frame, which whole frames (WholeFrames) never make it do.
type fedSource struct {
	t    testing.TB
	next *bufpool.Buffer
}

var errMidFrame = errors.New("fed bytes end inside a frame")

func (s *fedSource) Read([]byte) (int, error) { return 0, errMidFrame }

func (s *fedSource) NextBuffer(*bufpool.Pool, int) (*bufpool.Buffer, error) {
	b := s.next
	if b == nil {
		return nil, ErrWouldBlock
	}
	s.next = nil
	return b, nil
}

// give makes b the source's next bytes.
func (s *fedSource) give(b *bufpool.Buffer) {
	if s.next != nil {
		s.t.Fatal("a buffer given before the Reader took the last one")
	}
	s.next = b
}

func feedBuffer(pool *bufpool.Pool, p []byte) *bufpool.Buffer {
	b := pool.Get(max(len(p), 1))
	b.SetLen(copy(b.Bytes(), p))
	return b
}

// A Reader over a source that gives buffers one at a time parses each, a
// header block across two of them, and says ErrWouldBlock between them,
// holding nothing then.
func TestBufferSource(t *testing.T) {
	pool := bufpool.New(nil)
	src := &fedSource{t: t}
	r := NewReader(src, ReaderConfig{Pool: pool})
	if !r.Empty() {
		t.Fatal("new pooled Reader not Empty")
	}
	if f, err := r.ReadFrame(); f != nil || err != ErrWouldBlock {
		t.Fatalf("nothing given: %v, %v; want ErrWouldBlock", f, err)
	}
	hdrs := encodeBlock(":path", "/x")
	src.give(feedBuffer(pool, cat(frameBytes(TypeData, 0, 1, []byte("abc")), frameBytes(TypeHeaders, 0, 1, hdrs[:1]))))
	f, err := r.ReadFrame()
	if df, ok := f.(*DataFrame); err != nil || !ok || string(df.Data.Bytes()) != "abc" {
		t.Fatalf("first frame: %v, %v", f, err)
	}
	f.(*DataFrame).Data.Free()
	// The HEADERS frame opens a block; its CONTINUATION comes in the next
	// read.
	if f, err := r.ReadFrame(); f != nil || err != ErrWouldBlock {
		t.Fatalf("inside a header block, fed bytes used up: %v, %v; want ErrWouldBlock", f, err)
	}
	if !r.Empty() {
		t.Fatal("not Empty after ErrWouldBlock")
	}
	src.give(feedBuffer(pool, frameBytes(TypeContinuation, FlagEndHeaders, 1, hdrs[1:])))
	f, err = r.ReadFrame()
	if hf, ok := f.(*HeadersFrame); err != nil || !ok || len(hf.Fields) != 1 || hf.Fields[0].Value != "/x" {
		t.Fatalf("header block over two feeds: %v, %v", f, err)
	}
	if _, err := r.ReadFrame(); err != ErrWouldBlock {
		t.Fatalf("all used: %v, want ErrWouldBlock", err)
	}
	if r.HoldsReadBuffer() || r.HoldsScratch() {
		t.Fatalf("with nothing buffered: holds a read buffer %v, scratch %v", r.HoldsReadBuffer(), r.HoldsScratch())
	}

	// ReleaseScratch drops the scratch an Empty Reader keeps after its
	// last frame (ReadFrame lets it go only when it next asks its source),
	// and nothing while bytes are buffered.
	src.give(feedBuffer(pool, cat(frameBytes(TypePing, 0, 0, make([]byte, 8)), frameBytes(TypePing, 0, 0, make([]byte, 8)))))
	r.ReadFrame()
	r.ReleaseScratch()
	if !r.HoldsScratch() || !r.HoldsReadBuffer() {
		t.Fatal("ReleaseScratch with a frame still buffered dropped what it holds")
	}
	r.ReadFrame()
	if !r.Empty() || !r.HoldsScratch() {
		t.Fatalf("after the last frame: Empty %v, scratch %v; want true, true", r.Empty(), r.HoldsScratch())
	}
	r.ReleaseScratch()
	if r.HoldsScratch() {
		t.Fatal("ReleaseScratch on an Empty Reader kept its scratch")
	}
	r.Close()
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d, want 0", n)
	}

	// Bytes that end inside a frame make the Reader read the source for
	// the rest, and fail with what the source says.
	src = &fedSource{t: t}
	r = NewReader(src, ReaderConfig{Pool: pool})
	src.give(feedBuffer(pool, frameBytes(TypePing, 0, 0, make([]byte, 8))[:12]))
	if _, err := r.ReadFrame(); !errors.Is(err, errMidFrame) {
		t.Fatalf("partial frame: %v, want errMidFrame", err)
	}
	r.Close()
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("pool.Outstanding() = %d, want 0", n)
	}

	// An unpooled Reader is never Empty: it keeps its read buffer.
	if NewReader(src, ReaderConfig{Pool: pool, NoPooledReads: true}).Empty() {
		t.Fatal("unpooled Reader Empty")
	}
}

// FuzzFeed cuts arbitrary bytes at frame boundaries into reads, gives them
// one by one through a source that has nothing else (fedSource), as
// h2conn's reader does in sockio's ReadEach, and parses each. It checks that the Reader
// never reads the source for the rest of a frame (WholeFrames held), and
// that it parses what it parses from the same bytes in one piece: the same
// frames and errors.
func FuzzFeed(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(uint8(1), s)
		f.Add(uint8(3), s)
	}
	f.Fuzz(func(t *testing.T, per uint8, wire []byte) {
		// The whole frames at the start of wire.
		end := 0
		for end+HeaderLen <= len(wire) {
			n := HeaderLen + (int(wire[end])<<16 | int(wire[end+1])<<8 | int(wire[end+2]))
			if end+n > len(wire) {
				break
			}
			end += n
		}
		wire = wire[:end]
		cfg := ReaderConfig{Pool: fuzzPool, MaxHeaderListSize: 2048}
		base := fuzzPool.Outstanding()

		ref := NewReader(&fakeReady{chopReader: chopReader{data: wire, max: len(wire) + 1}}, cfg)
		want := summarize(ref, func(r *Reader) (Frame, error) { return r.ReadFrame() })
		ref.Close()

		src := &fedSource{t: t}
		r := NewReader(src, cfg)
		var got []string
		off, frames := 0, 0
		per = per%8 + 1
		for off < len(wire) && (len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "conn ")) {
			// The next read: per frames.
			k := off
			for i := uint8(0); i < per && k < len(wire); i++ {
				k += HeaderLen + (int(wire[k])<<16 | int(wire[k+1])<<8 | int(wire[k+2]))
			}
			if !WholeFrames(wire[off:k]) {
				t.Fatalf("frames %d.. are not whole", frames)
			}
			if !r.Empty() {
				t.Fatal("not Empty after ErrWouldBlock")
			}
			src.give(feedBuffer(fuzzPool, wire[off:k]))
			off = k
			frames += int(per)
			got = append(got, summarize(r, func(r *Reader) (Frame, error) { return r.ReadFrame() })...)
			if got[len(got)-1] == "would block" {
				got = got[:len(got)-1]
			}
		}
		r.Close()
		if len(want) > 0 && want[len(want)-1] == "conn EOF" {
			want = want[:len(want)-1]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("fed in reads of %d frames:\n got %q\nwant %q", per, got, want)
		}
		if n := fuzzPool.Outstanding() - base; n != 0 {
			t.Fatalf("pool outstanding %d", n)
		}
	})
}

// summarize reads frames with next until a connection error (or
// ErrWouldBlock) and describes each, freeing DATA buffers.
func summarize(r *Reader, next func(*Reader) (Frame, error)) []string {
	var out []string
	for range 1000 {
		f, err := next(r)
		if err == ErrWouldBlock {
			return append(out, "would block")
		}
		if err != nil {
			var se StreamError
			if errors.As(err, &se) {
				out = append(out, fmt.Sprintf("stream %v", se))
				continue
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				err = io.EOF
			}
			return append(out, fmt.Sprintf("conn %v", err))
		}
		s := fmt.Sprintf("%+v", f.Header())
		switch f := f.(type) {
		case *DataFrame:
			if f.Data != nil {
				s += " " + string(f.Data.Bytes())
				f.Data.Free()
			}
		case *HeadersFrame:
			s += fmt.Sprint(" ", f.Fields)
		}
		out = append(out, s)
	}
	return out
}
