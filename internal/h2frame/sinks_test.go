package h2frame

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// writeMixed queues a batch mixing copied and referenced payloads, small
// frames and a batch larger than one write buffer.
func writeMixed(w *Writer, payload *bufpool.Buffer) {
	w.WriteWindowUpdate(0, 100)
	w.WriteDataBuffer(1, false, payload, 0, 16384)
	w.WriteData(3, false, payload.Bytes()[5:105])
	w.WriteDataBuffer(1, false, payload, 16384, 16384)
	for i := 0; i < 5; i++ {
		w.WriteData(5, false, payload.Bytes()[:10000]) // copies past the first write buffer
	}
	w.WriteDataBuffer(1, true, payload, 7, 9000)
	w.WritePing(false, [8]byte{9})
}

func checkMixed(t *testing.T, r *Reader, payload []byte) {
	t.Helper()
	want := []struct {
		typ    Type
		stream uint32
		data   []byte
	}{
		{TypeWindowUpdate, 0, nil},
		{TypeData, 1, payload[:16384]},
		{TypeData, 3, payload[5:105]},
		{TypeData, 1, payload[16384:32768]},
		{TypeData, 5, payload[:10000]}, {TypeData, 5, payload[:10000]}, {TypeData, 5, payload[:10000]},
		{TypeData, 5, payload[:10000]}, {TypeData, 5, payload[:10000]},
		{TypeData, 1, payload[7:9007]},
		{TypePing, 0, nil},
	}
	for i, w := range want {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		h := f.Header()
		if h.Type != w.typ || h.StreamID != w.stream {
			t.Fatalf("frame %d: %v, want %v on %d", i, h, w.typ, w.stream)
		}
		if d, ok := f.(*DataFrame); ok {
			if !bytes.Equal(d.Data.Bytes(), w.data) {
				t.Fatalf("frame %d: payload differs", i)
			}
			d.Data.Free()
		}
	}
}

func mixedPayload(pool *bufpool.Pool) *bufpool.Buffer {
	p := pool.Get(40000)
	for i := range p.Bytes() {
		p.Bytes()[i] = byte(i * 7)
	}
	return p
}

// TestWriterSinks writes the same batch through each write strategy: one
// WriteVec, sequential Writes to a plain io.Writer, and net.Buffers (writev)
// on a loopback TCP connection.
func TestWriterSinks(t *testing.T) {
	pool := bufpool.New(nil)
	payload := mixedPayload(pool)
	defer payload.Free()

	t.Run("vector", func(t *testing.T) {
		var sink vecSink
		w := NewWriter(&sink, WriterConfig{Pool: pool})
		writeMixed(w, payload)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if sink.vecs != 1 || sink.writes != 0 {
			t.Errorf("%d WriteVec and %d Write calls, want 1 and 0", sink.vecs, sink.writes)
		}
		checkMixed(t, NewReader(&sink, ReaderConfig{}), payload.Bytes())
	})
	t.Run("sequential", func(t *testing.T) {
		var sink bytes.Buffer
		w := NewWriter(&sink, WriterConfig{Pool: pool})
		writeMixed(w, payload)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		checkMixed(t, NewReader(&sink, ReaderConfig{}), payload.Bytes())
	})
	t.Run("tcp", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		got := make(chan []byte, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- nil
				return
			}
			b, _ := io.ReadAll(c)
			c.Close()
			got <- b
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		w := NewWriter(c, WriterConfig{Pool: pool}) // a *net.TCPConn: Flush writes through net.Buffers
		writeMixed(w, payload)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		c.Close()
		checkMixed(t, NewReader(bytes.NewReader(<-got), ReaderConfig{}), payload.Bytes())
	})
	if got := pool.Outstanding(); got != 1 {
		t.Errorf("pool outstanding %d, want 1 (the payload)", got)
	}
}

// TestWriterClose checks that Close drops queued frames and references.
func TestWriterClose(t *testing.T) {
	pool := bufpool.New(nil)
	payload := mixedPayload(pool)
	var sink bytes.Buffer
	w := NewWriter(&sink, WriterConfig{Pool: pool})
	writeMixed(w, payload)
	if w.Buffered() == 0 {
		t.Fatal("nothing buffered")
	}
	w.Close()
	payload.Free()
	if sink.Len() != 0 || w.Buffered() != 0 || pool.Outstanding() != 0 {
		t.Fatalf("after Close: wrote %d, buffered %d, outstanding %d", sink.Len(), w.Buffered(), pool.Outstanding())
	}
}

// errWriter fails every write.
type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestWriterFlushError checks that a failed Flush reports the error and
// still releases every buffer.
func TestWriterFlushError(t *testing.T) {
	pool := bufpool.New(nil)
	payload := mixedPayload(pool)
	w := NewWriter(errWriter{}, WriterConfig{Pool: pool})
	writeMixed(w, payload)
	if err := w.Flush(); err != io.ErrClosedPipe {
		t.Fatalf("Flush = %v", err)
	}
	w.WritePing(true, [8]byte{})
	if err := w.Flush(); err != io.ErrClosedPipe {
		t.Fatalf("inline Flush = %v", err)
	}
	payload.Free()
	if w.Buffered() != 0 || pool.Outstanding() != 0 {
		t.Fatalf("buffered %d, outstanding %d", w.Buffered(), pool.Outstanding())
	}
}
