package h2conn

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// fuzzSeed builds a client byte stream with the frame writer.
func fuzzSeed(build func(w *h2frame.Writer)) []byte {
	var buf bytes.Buffer
	w := h2frame.NewWriter(&buf, h2frame.WriterConfig{})
	w.WritePreface()
	w.WriteSettings(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 1 << 16})
	build(w)
	w.Flush()
	w.Close()
	return buf.Bytes()
}

// FuzzServerConn feeds arbitrary bytes, after the preface, to a server
// engine: it must never panic, must end when the input ends, and must
// give every pooled buffer back.
func FuzzServerConn(f *testing.F) {
	f.Add(fuzzSeed(func(w *h2frame.Writer) {}))
	f.Add(fuzzSeed(func(w *h2frame.Writer) {
		w.WriteHeaders(1, false, reqFields("/a"))
		w.WriteData(1, true, []byte("hello"))
		w.WritePing(false, [8]byte{1})
	}))
	f.Add(fuzzSeed(func(w *h2frame.Writer) {
		w.WriteHeaders(1, false, reqFields("/a"))
		w.WriteRSTStream(1, h2frame.ErrCodeCancel)
		w.WriteHeaders(3, true, reqFields("/b"))
		w.WriteWindowUpdate(0, 1000)
		w.WriteWindowUpdate(3, 1000)
		w.WriteSettings(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 1})
		w.WriteGoAway(0, h2frame.ErrCodeNo, nil)
	}))
	f.Add(fuzzSeed(func(w *h2frame.Writer) {
		w.WriteData(1, false, []byte("idle"))
	}))
	f.Add(fuzzSeed(func(w *h2frame.Writer) {
		w.WriteHeaders(1, false, reqFields("/a"))
		w.WriteHeaders(1, false, reqFields("/a"))
		w.WriteSettingsAck()
		w.WritePriority(1, h2frame.Priority{StreamDep: 1})
	}))
	f.Fuzz(func(t *testing.T, in []byte) {
		pool := bufpool.New(nil)
		cn, sn := net.Pipe()
		h := HandlerFunc(func(s *Stream) {
			go func() {
				defer s.Release()
				for {
					b, err := s.Recv()
					if err != nil {
						break
					}
					b.Free()
				}
				if s.WriteHeaders(respFields, false) == nil {
					s.WriteData(pool.Copy([]byte("ok")), false)
					s.WriteTrailers(trailerFields)
				}
			}()
		})
		srv := NewServerConn(sn, Config{Pool: pool, SettingsTimeout: -1}, h)
		done := make(chan error, 1)
		go func() { done <- srv.Serve() }()
		go io.Copy(io.Discard, cn)
		cn.SetWriteDeadline(time.Now().Add(2 * time.Second))
		cn.Write(in)
		cn.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("server did not end with its input")
		}
		deadline := time.Now().Add(2 * time.Second)
		for pool.Outstanding() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d pooled buffers not returned", pool.Outstanding())
			}
			time.Sleep(time.Millisecond)
		}
	})
}
