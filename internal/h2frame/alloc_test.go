package h2frame

import (
	"bytes"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// loopReader returns prefix once, then loop forever.
type loopReader struct {
	prefix, loop []byte
	off          int
}

func (l *loopReader) Read(p []byte) (int, error) {
	if len(l.prefix) > 0 {
		n := copy(p, l.prefix)
		l.prefix = l.prefix[n:]
		return n, nil
	}
	n := 0
	for n < len(p) {
		k := copy(p[n:], l.loop[l.off:])
		n += k
		l.off = (l.off + k) % len(l.loop)
	}
	return n, nil
}

// loopReady is loopReader as a BufferSource delivering at most max bytes.
type loopReady struct {
	loopReader
	max int
}

func (l *loopReady) NextBuffer(pool *bufpool.Pool, size int) (*bufpool.Buffer, error) {
	b := pool.Get(size)
	n, _ := l.Read(b.Bytes()[:min(size, l.max)])
	b.SetLen(n)
	return b, nil
}

// indexedRequest is grpcRequest without grpc-timeout, which our encoder
// never indexes (its value changes per call), so that every field of the
// second block comes from the dynamic table and decodes without allocating.
var indexedRequest = append(grpcRequest[:6:6], grpcRequest[7])

func steadyReadCases(t testing.TB) []struct {
	name         string
	prefix, loop []byte
} {
	cs := []struct {
		name         string
		prefix, loop []byte
	}{
		{"data_100B", nil, frameBytes(TypeData, 0, 1, make([]byte, 100))},
		{"data_16KiB", nil, frameBytes(TypeData, 0, 1, make([]byte, 16384))},
		{"data_padded", nil, frameBytes(TypeData, FlagPadded, 1, make([]byte, 300))},
		{"settings", nil, frameBytes(TypeSettings, 0, 0, cat(settingBytes(SettingInitialWindowSize, 1<<20), settingBytes(SettingMaxFrameSize, 1<<20)))},
		{"settings_ack", nil, frameBytes(TypeSettings, FlagAck, 0, nil)},
		{"ping", nil, pingWire},
		{"window_update", nil, frameBytes(TypeWindowUpdate, 0, 1, u32(1000))},
		{"rst_stream", nil, frameBytes(TypeRSTStream, 0, 1, u32(8))},
		{"goaway", nil, frameBytes(TypeGoAway, 0, 0, cat(u32(1), u32(0), []byte("debug")))},
		{"priority", nil, frameBytes(TypePriority, 0, 3, cat(u32(1), []byte{1}))},
	}
	if hpackReady() {
		var sink bytes.Buffer
		w := NewWriter(&sink, WriterConfig{})
		w.WriteHeaders(1, false, indexedRequest)
		w.Flush()
		first := bytes.Clone(sink.Bytes())
		w.WriteHeaders(1, false, indexedRequest)
		w.Flush()
		cs = append(cs, struct {
			name         string
			prefix, loop []byte
		}{"headers", first, bytes.Clone(sink.Bytes()[len(first):])})
		w.SetPeerMaxFrameSize(MinMaxFrameSize)
	}
	return cs
}

func TestReadAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	for _, tc := range steadyReadCases(t) {
		for _, pooled := range []bool{false, true} {
			name := tc.name + "/plain"
			if pooled {
				name = tc.name + "/pooled"
			}
			t.Run(name, func(t *testing.T) {
				var src interface{ Read([]byte) (int, error) }
				lr := loopReader{prefix: tc.prefix, loop: tc.loop}
				if pooled {
					src = &loopReady{loopReader: lr, max: len(tc.loop)}
				} else {
					src = &lr
				}
				r := NewReader(src, ReaderConfig{MaxFrameSize: 1 << 20})
				defer r.Close()
				read := func() {
					f, err := r.ReadFrame()
					if err != nil {
						t.Fatal(err)
					}
					if d, ok := f.(*DataFrame); ok && d.Data != nil {
						d.Data.Free()
					}
				}
				for range 10 {
					read()
				}
				if n := testing.AllocsPerRun(200, read); n != 0 {
					t.Errorf("ReadFrame allocates %v times", n)
				}
			})
		}
	}
}

func TestWriteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	pool := bufpool.New(nil)
	payload := pool.Get(64 << 10)
	defer payload.Free()
	ops := []struct {
		name string
		fn   func(w *Writer)
	}{
		{"data_small", func(w *Writer) { w.WriteData(1, false, payload.Bytes()[:100]) }},
		{"data_16KiB", func(w *Writer) { w.WriteData(1, false, payload.Bytes()[:16384]) }},
		{"data_buffer_small", func(w *Writer) { w.WriteDataBuffer(1, false, payload, 0, 100) }},
		{"data_buffer_large", func(w *Writer) {
			for i := 0; i < 4; i++ {
				w.WriteDataBuffer(1, i == 3, payload, i*16384, 16384)
			}
		}},
		{"settings", func(w *Writer) {
			w.WriteSettings(Setting{SettingInitialWindowSize, 1 << 20}, Setting{SettingMaxFrameSize, 1 << 20})
		}},
		{"settings_ack", func(w *Writer) { w.WriteSettingsAck() }},
		{"ping", func(w *Writer) { w.WritePing(true, [8]byte{1}) }},
		{"window_update", func(w *Writer) { w.WriteWindowUpdate(1, 1000) }},
		{"rst_stream", func(w *Writer) { w.WriteRSTStream(1, ErrCodeCancel) }},
		{"goaway", func(w *Writer) { w.WriteGoAway(1, ErrCodeNo, []byte("bye")) }},
		{"priority", func(w *Writer) { w.WritePriority(3, Priority{StreamDep: 1}) }},
		{"preface", func(w *Writer) { w.WritePreface() }},
		{"raw", func(w *Writer) { w.WriteRaw(FrameHeader{Type: 0x42, StreamID: 1}, payload.Bytes()[:20]) }},
		{"header_block_split", func(w *Writer) { w.WriteHeaderBlock(1, true, payload.Bytes()[:40000]) }},
		{"mixed", func(w *Writer) {
			w.WriteWindowUpdate(0, 1000)
			w.WriteDataBuffer(1, false, payload, 0, 16384)
			w.WriteData(3, false, payload.Bytes()[:10])
			w.WriteDataBuffer(5, false, payload, 0, 16384)
			w.WritePing(false, [8]byte{})
		}},
	}
	if hpackReady() {
		ops = append(ops, struct {
			name string
			fn   func(w *Writer)
		}{"headers", func(w *Writer) { w.WriteHeaders(1, false, grpcRequest) }})
	}
	for _, op := range ops {
		for _, sink := range []struct {
			name string
			w    func() interface{ Write([]byte) (int, error) }
		}{{"discard", func() interface{ Write([]byte) (int, error) } { return &discardSink{} }},
			{"vector", func() interface{ Write([]byte) (int, error) } { return &discardVec{} }}} {
			t.Run(op.name+"/"+sink.name, func(t *testing.T) {
				w := NewWriter(sink.w(), WriterConfig{Pool: pool})
				defer w.Close()
				run := func() {
					op.fn(w)
					if err := w.Flush(); err != nil {
						t.Fatal(err)
					}
				}
				for range 10 {
					run()
				}
				if n := testing.AllocsPerRun(200, run); n != 0 {
					t.Errorf("Write+Flush allocates %v times", n)
				}
			})
		}
	}
	if pool.Outstanding() != 1 {
		t.Errorf("pool outstanding = %d, want 1 (the payload)", pool.Outstanding())
	}
}
