package h2frame

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// fuzzSeeds are valid encodings of every frame type, alone and in
// sequences, that seed FuzzFrame.
func fuzzSeeds(t testing.TB) [][]byte {
	seeds := [][]byte{
		frameBytes(TypeData, 0, 1, []byte("hello")),
		frameBytes(TypeData, FlagPadded|FlagEndStream, 1, []byte{3, 'a', 'b', 0, 0, 0}),
		frameBytes(TypeData, FlagPadded, 1, cat([]byte{9}, make([]byte, 200))),
		frameBytes(TypeHeaders, FlagEndHeaders|FlagPriority|FlagPadded, 3, cat([]byte{2}, u32(1), []byte{9}, encodeBlock(":path", "/x", "te", "trailers"), []byte{0, 0})),
		cat(frameBytes(TypeHeaders, 0, 1, encodeBlock(":method", "POST")), frameBytes(TypeContinuation, FlagEndHeaders, 1, encodeBlock("x", "y"))),
		frameBytes(TypePriority, 0, 3, cat(u32(1), []byte{16})),
		frameBytes(TypeRSTStream, 0, 1, u32(8)),
		frameBytes(TypeSettings, 0, 0, cat(settingBytes(SettingMaxFrameSize, 1<<14), settingBytes(SettingInitialWindowSize, 1<<20), settingBytes(0x99, 1))),
		frameBytes(TypeSettings, FlagAck, 0, nil),
		frameBytes(TypePushPromise, FlagEndHeaders, 1, cat(u32(2), encodeBlock(":path", "/"))),
		pingWire,
		frameBytes(TypeGoAway, 0, 0, cat(u32(5), u32(2), []byte("debug"))),
		frameBytes(TypeWindowUpdate, 0, 0, u32(1000)),
		frameBytes(TypeWindowUpdate, 0, 1, u32(1)),
		frameBytes(0x33, 0, 0, []byte("unknown")),
		[]byte(clientPreface),
	}
	// Seeds stay small: the fuzzer spends up to a minute minimizing each
	// new input derived from a large one.
	if hpackReady() {
		seeds = append(seeds, xnetHeaderWire(t, grpcRequest[:3], grpcRequest))
	}
	seeds = append(seeds, xnetFrames(t, 300))
	return seeds
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzFrame from fuzzSeeds
// when H2FRAME_WRITE_CORPUS is set.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("H2FRAME_WRITE_CORPUS") == "" {
		t.Skip("set H2FRAME_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzFrame")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed_%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzFrame feeds arbitrary bytes to a Reader with small limits. The first
// byte picks the source: chunk size and pooled or not. It checks that the
// Reader never panics, returns only protocol or I/O errors, hands out DATA
// buffers no longer than the frame, keeps header lists within the limit,
// and leaves the pool balanced.
func FuzzFrame(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(append([]byte{0}, s...))
		f.Add(append([]byte{0x83}, s...))
	}
	f.Fuzz(fuzzFrameOne)
}

// fuzzFrameOne is FuzzFrame's body, callable from tests.
func fuzzFrameOne(t *testing.T, in []byte) {
	if len(in) == 0 {
		return
	}
	mode, wire := in[0], in[1:]
	pool := fuzzPool // shared: a fresh pool per input would allocate every buffer anew
	base := pool.Outstanding()
	pooled := mode&0x80 != 0
	const maxList = 2048
	newReader := func() *Reader {
		c := chopReader{data: wire, max: 1 + int(mode&0x3f)*97}
		var src io.Reader = &c
		if pooled {
			src = &fakeReady{chopReader: c}
		}
		r := NewReader(src, ReaderConfig{Pool: pool, MaxHeaderListSize: maxList, ReadBufferSize: 64 + int(mode&0x40)*100})
		if mode&0x40 != 0 {
			r.ReadPreface()
		}
		return r
	}
	r := newReader()
	// forgetful reads the same bytes without replaying header blocks
	// (replay.go): both must return the same.
	forgetful := newReader()
	defer forgetful.Close()
	for range 1000 {
		fr, err := r.ReadFrame()
		forgetful.ForgetHeaderBlocks()
		sameAsForgetful(t, fr, err, forgetful)
		if err != nil {
			var ce ConnError
			var se StreamError
			switch {
			case errors.As(err, &se):
				if se.StreamID == 0 || se.Reason == "" {
					t.Fatalf("bad stream error %#v", se)
				}
				continue
			case errors.As(err, &ce):
				if ce.Reason == "" {
					t.Fatalf("connection error without reason %#v", ce)
				}
			case err == io.EOF, err == io.ErrUnexpectedEOF:
			default:
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			break
		}
		switch fr := fr.(type) {
		case *DataFrame:
			if fr.Data != nil {
				if fr.Data.Len() == 0 || uint32(fr.Data.Len()) > fr.FlowLen {
					t.Fatalf("DATA buffer %d bytes for a %d-byte frame", fr.Data.Len(), fr.FlowLen)
				}
				fr.Data.Free()
			}
		case *HeadersFrame:
			var size uint32
			for _, h := range fr.Fields {
				size += h.Size()
			}
			if size > maxList {
				t.Fatalf("header list of %d bytes past the %d limit", size, maxList)
			}
			if !fr.Flags.Has(FlagEndHeaders) {
				t.Fatal("HEADERS returned without END_HEADERS")
			}
		case *SettingsFrame:
			for _, s := range fr.Settings {
				if s.Valid() != nil {
					t.Fatalf("invalid setting returned: %+v", s)
				}
			}
		case *WindowUpdateFrame:
			if fr.Increment == 0 {
				t.Fatal("zero WINDOW_UPDATE returned")
			}
		}
		if pooled && r.Buffered() == 0 && r.HoldsReadBuffer() {
			t.Fatal("pooled reader idle with a read buffer")
		}
		checkReencode(t, fr)
	}
	r.Close()
	if n := pool.Outstanding() - base; n != 0 {
		t.Fatalf("pool outstanding %d after Close", n)
	}
}

var fuzzPool = bufpool.New(nil)

// sameAsForgetful reads the next frame from forgetful and checks that it is
// the frame (or error) another Reader returned for the same bytes.
func sameAsForgetful(t *testing.T, fr Frame, err error, forgetful *Reader) {
	fr2, err2 := forgetful.ReadFrame()
	if df, ok := fr2.(*DataFrame); ok && df.Data != nil {
		df.Data.Free()
	}
	if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
		t.Fatalf("error %v, without replays %v", err, err2)
	}
	hf, ok := fr.(*HeadersFrame)
	if !ok {
		return
	}
	hf2, ok := fr2.(*HeadersFrame)
	if !ok {
		t.Fatalf("HEADERS, without replays %T", fr2)
	}
	if hf.Invalid != hf2.Invalid || hf.Truncated != hf2.Truncated || !slices.Equal(hf.Fields, hf2.Fields) {
		t.Fatalf("HEADERS %+v, without replays %+v", hf, hf2)
	}
}

// checkReencode writes a parsed control frame with the Writer and parses it
// again: the fields must survive the round trip.
func checkReencode(t *testing.T, f Frame) {
	var sink bytes.Buffer
	w := NewWriter(&sink, WriterConfig{})
	switch f := f.(type) {
	case *PingFrame:
		w.WritePing(f.IsAck(), f.Data)
	case *SettingsFrame:
		if f.IsAck() {
			w.WriteSettingsAck()
		} else {
			w.WriteSettings(f.Settings...)
		}
	case *WindowUpdateFrame:
		w.WriteWindowUpdate(f.StreamID, f.Increment)
	case *RSTStreamFrame:
		w.WriteRSTStream(f.StreamID, f.Code)
	case *GoAwayFrame:
		w.WriteGoAway(f.LastStreamID, f.Code, f.Debug)
	case *PriorityFrame:
		w.WritePriority(f.StreamID, f.Priority)
	default:
		return
	}
	w.Flush()
	r := NewReader(&sink, ReaderConfig{MaxFrameSize: MaxMaxFrameSize})
	defer r.Close()
	g, err := r.ReadFrame()
	if err != nil {
		t.Fatalf("re-encoded %v: %v", f.Header(), err)
	}
	same := false
	switch f := f.(type) {
	case *PingFrame:
		same = g.(*PingFrame).Data == f.Data && g.(*PingFrame).IsAck() == f.IsAck()
	case *SettingsFrame:
		same = slices.Equal(g.(*SettingsFrame).Settings, f.Settings) && g.(*SettingsFrame).IsAck() == f.IsAck()
	case *WindowUpdateFrame:
		same = *g.(*WindowUpdateFrame) == WindowUpdateFrame{FrameHeader{4, TypeWindowUpdate, 0, f.StreamID}, f.Increment}
	case *RSTStreamFrame:
		same = *g.(*RSTStreamFrame) == RSTStreamFrame{FrameHeader{4, TypeRSTStream, 0, f.StreamID}, f.Code}
	case *GoAwayFrame:
		h := g.(*GoAwayFrame)
		same = h.LastStreamID == f.LastStreamID && h.Code == f.Code && bytes.Equal(h.Debug, f.Debug)
	case *PriorityFrame:
		same = g.(*PriorityFrame).Priority == f.Priority && g.Header().StreamID == f.StreamID
	}
	if !same {
		t.Fatalf("re-encoded %v read back as %+v", f.Header(), g)
	}
}
