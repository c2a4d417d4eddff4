package h2conn

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// TestConcurrentWriteRefused: while one goroutine's WriteData waits for
// window with part of its payload sent, another goroutine's WriteData or
// WriteTrailers on the stream fails with ErrConcurrentWrite and sends
// nothing; the first payload arrives whole and the stream goes on.
func TestConcurrentWriteRefused(t *testing.T) {
	g := runtime.NumGoroutine()
	const size = 200 << 10 // over the client's 64 KiB stream window
	payload := bytes.Repeat([]byte{'x'}, size)
	errs := make(chan [2]error, 1)
	h := func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) {
			go func() {
				s.WriteHeaders(respFields, false)
				done := make(chan error, 1)
				go func() { done <- s.WriteData(pool.Copy(payload), false) }()
				// Wait until the first write waits for window.
				for {
					s.conn.mu.Lock()
					parked := s.writer && s.sendWaiting
					s.conn.mu.Unlock()
					if parked {
						break
					}
					time.Sleep(time.Millisecond)
				}
				errs <- [2]error{s.WriteData(pool.Copy([]byte("second")), false), s.WriteTrailers(trailerFields)}
				if err := <-done; err != nil {
					t.Errorf("first WriteData: %v", err)
				}
				s.WriteTrailers(trailerFields)
			}()
		})
	}
	p := newPair(t, Config{InitialStreamWindow: 65535, InitialConnWindow: 1 << 20}, Config{}, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	got := <-errs // the client reads nothing before: the first write stays parked
	for i, what := range []string{"WriteData", "WriteTrailers"} {
		if got[i] != ErrConcurrentWrite {
			t.Errorf("concurrent %s = %v, want ErrConcurrentWrite", what, got[i])
		}
	}
	var body []byte
	for {
		b, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		body = append(body, b.Bytes()...)
		b.Free()
	}
	if !bytes.Equal(body, payload) {
		t.Errorf("received %d bytes, want the first payload alone (%d bytes)", len(body), size)
	}
	if s.Trailers() == nil {
		t.Error("no trailers")
	}
	<-s.Done()
	s.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}
