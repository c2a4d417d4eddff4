package h2frame

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"golang.org/x/net/http2"
)

// TestWriteThenXnetReads writes every frame type with our Writer and reads
// them back with x/net's Framer.
func TestWriteThenXnetReads(t *testing.T) {
	pool := bufpool.New(nil)
	var sink vecSink
	w := NewWriter(&sink, WriterConfig{Pool: pool})
	big := pool.Get(20000)
	for i := range big.Bytes() {
		big.Bytes()[i] = byte(i)
	}
	w.WriteData(1, false, []byte("hello"))
	w.WriteData(3, true, nil)
	w.WriteDataBuffer(5, true, big, 100, 16384)
	w.WriteDataBuffer(5, false, big, 7, 10)
	w.WriteSettings(Setting{SettingInitialWindowSize, 1 << 20}, Setting{SettingMaxFrameSize, 1 << 15}, Setting{0x99, 7})
	w.WriteSettingsAck()
	w.WritePing(true, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
	w.WriteWindowUpdate(0, 12345)
	w.WriteWindowUpdate(7, 1<<31-1)
	w.WriteRSTStream(9, ErrCodeCancel)
	w.WriteGoAway(11, ErrCodeEnhanceYourCalm, []byte("calm"))
	w.WritePriority(13, Priority{StreamDep: 1, Exclusive: true, Weight: 200})
	w.WriteRaw(FrameHeader{Type: 0xee, Flags: 0x3, StreamID: 15}, []byte("xyz"))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	big.Free()
	if got := pool.Outstanding(); got != 0 {
		t.Fatalf("pool outstanding after flush = %d", got)
	}
	if sink.vecs != 1 {
		t.Errorf("WriteVec calls = %d, want 1 (one syscall for the batch)", sink.vecs)
	}

	fr := http2.NewFramer(nil, bytes.NewReader(sink.Bytes()))
	fr.SetMaxReadFrameSize(1 << 20)
	next := func() http2.Frame {
		t.Helper()
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if f := next().(*http2.DataFrame); f.StreamID != 1 || f.StreamEnded() || string(f.Data()) != "hello" {
		t.Errorf("data 1: %v %q", f.Header(), f.Data())
	}
	if f := next().(*http2.DataFrame); f.StreamID != 3 || !f.StreamEnded() || len(f.Data()) != 0 {
		t.Errorf("data 3: %v", f.Header())
	}
	want := make([]byte, 20000)
	for i := range want {
		want[i] = byte(i)
	}
	if f := next().(*http2.DataFrame); f.StreamID != 5 || !f.StreamEnded() || !bytes.Equal(f.Data(), want[100:100+16384]) {
		t.Errorf("data 5 big: %v", f.Header())
	}
	if f := next().(*http2.DataFrame); f.StreamID != 5 || f.StreamEnded() || !bytes.Equal(f.Data(), want[7:17]) {
		t.Errorf("data 5 small: %v", f.Header())
	}
	sf := next().(*http2.SettingsFrame)
	if sf.NumSettings() != 3 || sf.Setting(0) != (http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}) ||
		sf.Setting(1) != (http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 15}) || sf.Setting(2) != (http2.Setting{ID: 0x99, Val: 7}) {
		t.Errorf("settings: %v", sf)
	}
	if f := next().(*http2.SettingsFrame); !f.IsAck() {
		t.Errorf("settings ack: %v", f)
	}
	if f := next().(*http2.PingFrame); !f.IsAck() || f.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Errorf("ping: %v", f)
	}
	if f := next().(*http2.WindowUpdateFrame); f.StreamID != 0 || f.Increment != 12345 {
		t.Errorf("wu: %v", f)
	}
	if f := next().(*http2.WindowUpdateFrame); f.StreamID != 7 || f.Increment != 1<<31-1 {
		t.Errorf("wu: %v", f)
	}
	if f := next().(*http2.RSTStreamFrame); f.StreamID != 9 || f.ErrCode != http2.ErrCodeCancel {
		t.Errorf("rst: %v", f)
	}
	if f := next().(*http2.GoAwayFrame); f.LastStreamID != 11 || f.ErrCode != http2.ErrCodeEnhanceYourCalm || string(f.DebugData()) != "calm" {
		t.Errorf("goaway: %v", f)
	}
	if f := next().(*http2.PriorityFrame); f.StreamID != 13 || f.StreamDep != 1 || !f.Exclusive || f.Weight != 200 {
		t.Errorf("priority: %v", f)
	}
	if f := next().(*http2.UnknownFrame); f.Type != 0xee || f.Flags != 3 || f.StreamID != 15 || string(f.Payload()) != "xyz" {
		t.Errorf("unknown: %v", f)
	}
	if _, err := fr.ReadFrame(); err == nil {
		t.Error("trailing bytes after the last frame")
	}
}

// xnetFrames writes one of every frame type with x/net's Framer.
func xnetFrames(t testing.TB, bigData int) []byte {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fr.WriteData(1, false, []byte("hello")))
	must(fr.WriteDataPadded(3, true, []byte("padded"), make([]byte, 7)))
	must(fr.WriteDataPadded(3, false, nil, make([]byte, 3)))
	must(fr.WriteData(5, true, bytes.Repeat([]byte("x"), bigData)))
	must(fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 8192}, http2.Setting{ID: 0x42, Val: 9}))
	must(fr.WriteSettingsAck())
	must(fr.WritePing(false, [8]byte{8, 7, 6, 5, 4, 3, 2, 1}))
	must(fr.WriteWindowUpdate(0, 1))
	must(fr.WriteWindowUpdate(3, 99))
	must(fr.WriteRSTStream(5, http2.ErrCodeRefusedStream))
	must(fr.WriteGoAway(7, http2.ErrCodeNo, []byte("bye")))
	must(fr.WritePriority(9, http2.PriorityParam{StreamDep: 3, Exclusive: false, Weight: 15}))
	must(fr.WriteRawFrame(0x20, 0, 0, []byte("ignored")))
	must(fr.WritePing(true, [8]byte{}))
	return buf.Bytes()
}

// TestXnetWritesWeRead reads x/net-encoded frames of every type, over
// sources returning whole, 1-byte and random chunks, plain and pooled.
func TestXnetWritesWeRead(t *testing.T) {
	wire := xnetFrames(t, 16384)
	for _, tc := range readerCases(wire) {
		t.Run(tc.name, func(t *testing.T) {
			pool := bufpool.New(nil)
			r := NewReader(tc.src(), ReaderConfig{Pool: pool})
			next := func() Frame {
				t.Helper()
				f, err := r.ReadFrame()
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			df := next().(*DataFrame)
			if df.StreamID != 1 || df.EndStream() || string(df.Data.Bytes()) != "hello" || df.FlowLen != 5 {
				t.Errorf("data 1: %v", df.Header())
			}
			df.Data.Free()
			df = next().(*DataFrame)
			if df.StreamID != 3 || !df.EndStream() || string(df.Data.Bytes()) != "padded" || df.FlowLen != 14 {
				t.Errorf("padded data: %v flow %d", df.Header(), df.FlowLen)
			}
			df.Data.Free()
			df = next().(*DataFrame)
			if df.Data != nil || df.FlowLen != 4 {
				t.Errorf("empty padded data: %v", df.Header())
			}
			df = next().(*DataFrame)
			if df.StreamID != 5 || df.Data.Len() != 16384 || !bytes.Equal(df.Data.Bytes(), bytes.Repeat([]byte("x"), 16384)) {
				t.Errorf("big data: %v", df.Header())
			}
			df.Data.Free()
			sf := next().(*SettingsFrame)
			if sf.IsAck() || len(sf.Settings) != 2 || sf.Settings[0] != (Setting{SettingHeaderTableSize, 8192}) || sf.Settings[1] != (Setting{0x42, 9}) {
				t.Errorf("settings: %+v", sf)
			}
			if sf := next().(*SettingsFrame); !sf.IsAck() || len(sf.Settings) != 0 {
				t.Errorf("ack: %+v", sf)
			}
			if pf := next().(*PingFrame); pf.IsAck() || pf.Data != [8]byte{8, 7, 6, 5, 4, 3, 2, 1} {
				t.Errorf("ping: %+v", pf)
			}
			if wf := next().(*WindowUpdateFrame); wf.StreamID != 0 || wf.Increment != 1 {
				t.Errorf("wu: %+v", wf)
			}
			if wf := next().(*WindowUpdateFrame); wf.StreamID != 3 || wf.Increment != 99 {
				t.Errorf("wu: %+v", wf)
			}
			if rf := next().(*RSTStreamFrame); rf.StreamID != 5 || rf.Code != ErrCodeRefusedStream {
				t.Errorf("rst: %+v", rf)
			}
			if gf := next().(*GoAwayFrame); gf.LastStreamID != 7 || gf.Code != ErrCodeNo || string(gf.Debug) != "bye" {
				t.Errorf("goaway: %+v", gf)
			}
			if pf := next().(*PriorityFrame); pf.StreamID != 9 || pf.StreamDep != 3 || pf.Exclusive || pf.Weight != 15 {
				t.Errorf("priority: %+v", pf)
			}
			// The unknown frame type 0x20 is skipped.
			if pf := next().(*PingFrame); !pf.IsAck() {
				t.Errorf("ping ack: %+v", pf)
			}
			if _, err := r.ReadFrame(); err != io.EOF {
				t.Errorf("end: %v, want EOF", err)
			}
			if tc.pooled && r.HoldsReadBuffer() {
				t.Error("pooled reader holds a read buffer at EOF")
			}
			r.Close()
			if got := pool.Outstanding(); got != 0 {
				t.Errorf("pool outstanding = %d", got)
			}
		})
	}
}

type readerCase struct {
	name   string
	pooled bool
	src    func() io.Reader
}

// readerCases is the set of sources every read test runs over.
func readerCases(wire []byte) []readerCase {
	var cs []readerCase
	for _, chunk := range []struct {
		name string
		max  int
		rnd  bool
	}{{"whole", 1 << 30, false}, {"1byte", 1, false}, {"random", 40000, true}, {"random_small", 20, true}} {
		for _, pooled := range []bool{false, true} {
			name := chunk.name + "/plain"
			if pooled {
				name = chunk.name + "/pooled"
			}
			cs = append(cs, readerCase{name, pooled, func() io.Reader {
				c := chopReader{data: wire, max: chunk.max}
				if chunk.rnd {
					c.rnd = rand.New(rand.NewPCG(1, uint64(chunk.max)))
				}
				if pooled {
					return &fakeReady{chopReader: c}
				}
				return &c
			}})
		}
	}
	return cs
}
