package h2frame

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// guard is written around each destination a testSink gives: the Reader
// must write inside the slice it was given and nowhere else.
const guardLen = 3

// testSink lands the data of odd streams in a fresh buffer per frame, at
// most room bytes (0: all), between guard bytes.
type testSink struct {
	pool   *bufpool.Pool
	room   int
	last   []byte // the destination given last
	calls  int
	lastID uint32
}

func (s *testSink) DataDest(id uint32, n int) (*bufpool.Buffer, []byte) {
	s.calls++
	s.lastID = id
	if id%2 == 0 {
		return nil, nil
	}
	k := n
	if s.room > 0 {
		k = min(k, s.room)
	}
	b := s.pool.Get(2*guardLen + k)
	for i := range b.Bytes() {
		b.Bytes()[i] = 0xEE
	}
	s.last = b.Bytes()[guardLen : guardLen+k]
	return b, s.last
}

// dataEvent is what a test sees of one DATA frame.
type dataEvent struct {
	stream uint32
	flow   uint32
	end    bool
	data   string // landed bytes, then the rest
}

// readDataEvents reads src to the end and returns its DATA frames, every
// buffer freed, and the final error.
func readDataEvents(t *testing.T, r *Reader, sink *testSink) ([]dataEvent, error) {
	t.Helper()
	var evs []dataEvent
	for {
		f, err := r.ReadFrame()
		if err != nil {
			var se StreamError
			if errors.As(err, &se) {
				evs = append(evs, dataEvent{stream: se.StreamID, data: "stream error " + se.Reason})
				continue
			}
			return evs, err
		}
		df, ok := f.(*DataFrame)
		if !ok {
			continue
		}
		ev := dataEvent{stream: df.StreamID, flow: df.FlowLen, end: df.EndStream()}
		if df.Sink != nil {
			if sink == nil || df.Landed == 0 || int(df.Landed) > len(sink.last) {
				t.Fatalf("frame landed %d bytes in a %d-byte destination", df.Landed, len(sink.last))
			}
			whole := df.Sink.Bytes()
			for i := range guardLen {
				if whole[i] != 0xEE || whole[len(whole)-1-i] != 0xEE {
					t.Fatalf("guard bytes overwritten around the destination")
				}
			}
			for _, c := range sink.last[df.Landed:] {
				if c != 0xEE {
					t.Fatalf("bytes written past the %d landed", df.Landed)
				}
			}
			ev.data = string(sink.last[:df.Landed])
			df.Sink.Free() // the landing's reference, ours
		} else if df.Landed != 0 {
			t.Fatalf("Landed %d without a Sink", df.Landed)
		}
		if df.Data != nil {
			ev.data += string(df.Data.Bytes())
			df.Data.Free()
		}
		evs = append(evs, ev)
	}
}

// sinkWire builds DATA frames on streams 1 and 2 (the sink declines 2):
// several sizes around the read buffer, padded and not.
func sinkWire() []byte {
	var wire []byte
	payload := func(n int, seed byte) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = seed + byte(i*7)
		}
		return p
	}
	pad := func(data []byte, padLen int) []byte {
		p := append([]byte{byte(padLen)}, data...)
		return append(p, make([]byte, padLen)...)
	}
	for i, n := range []int{16384, 5000, 2048, 2047, 100, 16000, 70000 % 16384, 9000} {
		wire = append(wire, frameBytes(TypeData, 0, 1, payload(n, byte(i)))...)
		wire = append(wire, frameBytes(TypeData, 0, 2, payload(n/2+1, byte(i+50)))...)
		wire = append(wire, frameBytes(TypeData, FlagPadded, 1, pad(payload(n/3+1, byte(i+100)), i*30))...)
	}
	wire = append(wire, frameBytes(TypeData, FlagPadded|FlagEndStream, 1, pad(payload(3000, 9), 255))...)
	wire = append(wire, frameBytes(TypeData, FlagEndStream, 2, nil)...)
	return wire
}

// The data a sink takes lands in its destination and only there; what does
// not fit, and every frame the sink declines, comes as Data; the frames a
// sink sees read exactly as without one, over every read pattern and both
// read modes.
func TestReaderDataSinkMatchesPlainRead(t *testing.T) {
	wire := sinkWire()
	for _, chop := range []int{1, 7, 4096, 20000, 1 << 20} {
		for _, pooled := range []bool{false, true} {
			for _, room := range []int{0, 1, 3000} {
				name := fmt.Sprintf("chop%d/pooled=%v/room%d", chop, pooled, room)
				t.Run(name, func(t *testing.T) {
					pool := bufpool.New(nil)
					read := func(sink *testSink, rnd *rand.Rand) []dataEvent {
						c := chopReader{data: wire, max: chop, rnd: rnd}
						var src io.Reader = &c
						if pooled {
							src = &fakeReady{chopReader: c}
						}
						r := NewReader(src, ReaderConfig{Pool: pool})
						if sink != nil {
							r.SetDataSink(sink)
						}
						evs, err := readDataEvents(t, r, sink)
						if err != io.EOF {
							t.Fatalf("read ended with %v; want io.EOF", err)
						}
						r.Close()
						return evs
					}
					want := read(nil, nil)
					sink := &testSink{pool: pool, room: room}
					got := read(sink, rand.New(rand.NewPCG(uint64(chop), 1)))
					if len(got) != len(want) {
						t.Fatalf("%d DATA frames with a sink, %d without", len(got), len(want))
					}
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("frame %d: stream %d flow %d end %v, %d bytes; want stream %d flow %d end %v, %d bytes",
								i, got[i].stream, got[i].flow, got[i].end, len(got[i].data), want[i].stream, want[i].flow, want[i].end, len(want[i].data))
						}
					}
					if sink.calls == 0 {
						t.Fatal("the sink was never asked")
					}
					if n := pool.Outstanding(); n != 0 {
						t.Fatalf("%d pool buffers outstanding", n)
					}
				})
			}
		}
	}
}

// Small payloads are not offered to the sink: it would cost more than the
// copy it saves.
func TestReaderDataSinkSkipsSmall(t *testing.T) {
	pool := bufpool.New(nil)
	wire := frameBytes(TypeData, 0, 1, make([]byte, sinkMinData-1))
	wire = append(wire, frameBytes(TypeData, FlagPadded, 1, append([]byte{200}, make([]byte, sinkMinData+100)...))...)
	sink := &testSink{pool: pool}
	r := NewReader(&chopReader{data: wire, max: 1 << 20}, ReaderConfig{Pool: pool})
	r.SetDataSink(sink)
	evs, err := readDataEvents(t, r, sink)
	if err != io.EOF || len(evs) != 2 {
		t.Fatalf("got %d frames, %v", len(evs), err)
	}
	if sink.calls != 0 {
		t.Fatalf("sink asked %d times for payloads under %d bytes of data", sink.calls, sinkMinData)
	}
	r.Close()
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("%d pool buffers outstanding", n)
	}
}

// A frame that ends mid-payload, or whose padding is too long, frees the
// destination reference the sink handed out: nothing leaks, and the error
// is the one without a sink.
func TestReaderDataSinkErrors(t *testing.T) {
	data := bytes.Repeat([]byte{'x'}, 10000)
	cases := []struct {
		name string
		wire []byte
		want error
	}{
		{"eof in data", frameBytes(TypeData, 0, 1, data)[:HeaderLen+6000], io.ErrUnexpectedEOF},
		{"eof in padding", frameBytes(TypeData, FlagPadded, 1, append(append([]byte{100}, data...), make([]byte, 100)...))[:HeaderLen+1+10000+50], io.ErrUnexpectedEOF},
		{"eof in rest", frameBytes(TypeData, 0, 1, data)[:HeaderLen+9000], io.ErrUnexpectedEOF},
		{"pad too long", frameBytes(TypeData, FlagPadded, 1, append([]byte{255}, make([]byte, 200)...)), ConnError{ErrCodeProtocol, "data_pad_too_long"}},
	}
	for _, tc := range cases {
		for _, pooled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pooled=%v", tc.name, pooled), func(t *testing.T) {
				pool := bufpool.New(nil)
				c := chopReader{data: tc.wire, max: 4096}
				var src io.Reader = &c
				if pooled {
					src = &fakeReady{chopReader: c}
				}
				r := NewReader(src, ReaderConfig{Pool: pool})
				sink := &testSink{pool: pool, room: 8000}
				r.SetDataSink(sink)
				_, err := r.ReadFrame()
				if err != tc.want {
					t.Fatalf("err %v; want %v", err, tc.want)
				}
				r.Close()
				if n := pool.Outstanding(); n != 0 {
					t.Fatalf("%d pool buffers outstanding", n)
				}
			})
		}
	}
}

// FuzzFrameSink reads arbitrary input with and without a DataSink: the
// frames, their data and the final error must agree, and no buffer may be
// left over.
func FuzzFrameSink(f *testing.F) {
	// Small seeds: the minimizer spends its time on large ones.
	small := frameBytes(TypeData, 0, 1, make([]byte, sinkMinData+10))
	small = append(small, frameBytes(TypeData, FlagPadded, 1, append([]byte{3}, make([]byte, sinkMinData+5)...))...)
	small = append(small, frameBytes(TypeData, FlagEndStream, 2, make([]byte, sinkMinData))...)
	f.Add(byte(0x83), byte(0), small)
	f.Add(byte(0x05), byte(7), small)
	f.Add(byte(0xc1), byte(40), small)
	for _, s := range fuzzSeeds(f) {
		f.Add(byte(0x81), byte(1), s)
	}
	f.Fuzz(runSinkFuzz)
}

// runSinkFuzz is FuzzFrameSink's body.
func runSinkFuzz(t *testing.T, mode, room byte, wire []byte) {
	pool := fuzzPool
	base := pool.Outstanding()
	read := func(sink *testSink) ([]dataEvent, error) {
		c := chopReader{data: wire, max: 1 + int(mode&0x3f)*97}
		var src io.Reader = &c
		if mode&0x80 != 0 {
			src = &fakeReady{chopReader: c}
		}
		r := NewReader(src, ReaderConfig{Pool: pool, ReadBufferSize: 64 + int(mode&0x40)*100})
		if sink != nil {
			r.SetDataSink(sink)
		}
		evs, err := readDataEvents(t, r, sink)
		r.Close()
		return evs, err
	}
	want, werr := read(nil)
	got, gerr := read(&testSink{pool: pool, room: int(room) * 64})
	if fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("error %v with a sink, %v without", gerr, werr)
	}
	if len(got) != len(want) {
		t.Fatalf("%d DATA frames with a sink, %d without", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("frame %d differs with a sink", i)
		}
	}
	if n := pool.Outstanding() - base; n != 0 {
		t.Fatalf("pool outstanding %d", n)
	}
}
