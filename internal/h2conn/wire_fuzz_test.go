package h2conn_test

// The end-to-end fuzz target: bytes after the client preface go to a server
// engine whose handler reads every request and answers it. Whatever the
// bytes, the engine must not panic, must end once the peer's side reaches
// EOF, and must give every pooled buffer back. Without -fuzz it runs the
// seeds below as a regular test.

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

func wireFuzzSeeds() [][]byte {
	settings := h2test.AppendFrame(nil, h2frame.TypeSettings, 0, 0, h2test.SettingsPayload(setting(h2frame.SettingInitialWindowSize, 100)))
	ack := h2test.AppendFrame(nil, h2frame.TypeSettings, h2frame.FlagAck, 0, nil)
	req := h2test.EncodeHeaders(h2test.Fields(reqFields("/fuzz", "content-length", "3")...)...)
	headers := func(id uint32, fl h2frame.Flags, b []byte) []byte {
		return h2test.AppendFrame(nil, h2frame.TypeHeaders, fl, id, b)
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	rapid := []byte{}
	for id := uint32(1); id < 40; id += 2 {
		rapid = append(rapid, headers(id, h2frame.FlagEndHeaders, req)...)
		rapid = h2test.AppendFrame(rapid, h2frame.TypeRSTStream, 0, id, []byte{0, 0, 0, 8})
	}
	return [][]byte{
		nil,
		cat(settings, ack),
		cat(settings, ack, headers(1, h2frame.FlagEndHeaders, req), h2test.AppendFrame(nil, h2frame.TypeData, h2frame.FlagEndStream, 1, []byte("abc"))),
		cat(settings, headers(1, h2frame.FlagEndHeaders|h2frame.FlagEndStream, req), headers(3, h2frame.FlagEndHeaders, req)),
		cat(settings, headers(1, 0, req[:5]), h2test.AppendFrame(nil, h2frame.TypeContinuation, h2frame.FlagEndHeaders, 1, req[5:])),
		cat(settings, headers(1, 0, req[:5]), h2test.AppendFrame(nil, h2frame.TypePing, 0, 0, make([]byte, 8))),
		cat(settings, headers(1, h2frame.FlagEndHeaders, req), h2test.AppendFrame(nil, h2frame.TypeData, h2frame.FlagPadded, 1, []byte{2, 'a', 0, 0})),
		cat(settings, headers(1, h2frame.FlagEndHeaders, req), h2test.AppendFrame(nil, h2frame.TypeData, 0, 1, make([]byte, 200))),
		cat(settings, h2test.AppendFrame(nil, h2frame.TypeWindowUpdate, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff})),
		cat(settings, h2test.AppendFrame(nil, h2frame.TypeGoAway, 0, 0, make([]byte, 8)), h2test.AppendFrame(nil, h2frame.TypePing, 0, 0, make([]byte, 8))),
		cat(settings, rapid),
		cat(settings, headers(1, h2frame.FlagEndHeaders, []byte{0xff, 0xff, 0xff, 0xff})), // bad HPACK
		cat(settings, h2test.AppendFrame(nil, 0x42, 0xff, 5, []byte("unknown"))),
		writerSeed(func(w *h2frame.Writer) {
			w.WriteHeaders(1, false, fields("/a"))
			w.WriteData(1, true, []byte("hello"))
			w.WritePing(false, [8]byte{1})
		}),
		writerSeed(func(w *h2frame.Writer) {
			w.WriteHeaders(1, false, fields("/a"))
			w.WriteRSTStream(1, h2frame.ErrCodeCancel)
			w.WriteHeaders(3, true, fields("/b"))
			w.WriteWindowUpdate(0, 1000)
			w.WriteWindowUpdate(3, 1000)
			w.WriteSettings(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 1})
			w.WriteGoAway(0, h2frame.ErrCodeNo, nil)
		}),
		writerSeed(func(w *h2frame.Writer) {
			w.WriteData(1, false, []byte("idle"))
		}),
		writerSeed(func(w *h2frame.Writer) {
			w.WriteHeaders(1, false, fields("/a"))
			w.WriteHeaders(1, false, fields("/a"))
			w.WriteSettingsAck()
			w.WritePriority(1, h2frame.Priority{StreamDep: 1})
		}),
	}
}

// writerSeed builds a client byte stream after the preface with our frame
// writer: SETTINGS, then what build writes.
func writerSeed(build func(w *h2frame.Writer)) []byte {
	var buf bytes.Buffer
	w := h2frame.NewWriter(&buf, h2frame.WriterConfig{})
	w.WriteSettings(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 1 << 16})
	build(w)
	w.Flush()
	w.Close()
	return buf.Bytes()
}

// fields are the header fields of a plain POST to path.
func fields(path string) []hpack.HeaderField { return h2test.Fields(reqFields(path)...) }

// FuzzWireServer feeds arbitrary bytes, after the preface, to a server
// engine: it must never panic, must end when the input ends, must not
// leave handlers blocked, and must give every pooled buffer back.
func FuzzWireServer(f *testing.F) {
	for _, s := range wireFuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pool := bufpool.New(nil)
		nc, pc := h2test.Pipe(h2test.PipeConfig{Capacity: 1 << 20})
		defer pc.Close()
		var handlers sync.WaitGroup
		c := h2conn.NewServerConn(nc, h2conn.Config{Pool: pool, MaxHeaderListSize: 8 << 10}, h2conn.HandlerFunc(func(s *h2conn.Stream) {
			handlers.Go(func() {
				defer s.Release()
				if _, err := readAll(s); err != nil {
					return
				}
				respond(pool, s, []byte("ok"))
			})
		}))
		served := make(chan error, 1)
		go func() { served <- c.Serve() }()
		go io.Copy(io.Discard, pc) // a reader, so the engine never blocks writing
		pc.Write([]byte(h2test.ClientPreface))
		pc.Write(data)
		pc.CloseWrite()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatalf("Serve still running 10s after the peer's EOF")
		}
		c.Close()
		hdone := make(chan struct{})
		go func() { handlers.Wait(); close(hdone) }()
		select {
		case <-hdone:
		case <-time.After(10 * time.Second):
			t.Fatalf("handlers still blocked 10s after the connection ended")
		}
		for deadline := time.Now().Add(5 * time.Second); pool.Outstanding() != 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%d pooled buffers outstanding after the connection ended", pool.Outstanding())
			}
			time.Sleep(time.Millisecond)
		}
	})
}
