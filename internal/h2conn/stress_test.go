package h2conn

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// Many streams at once over small windows, some reset halfway by the
// client, some echoed in full: nothing hangs, the echoes are intact, and
// everything is released at the end.
func TestStressMixed(t *testing.T) {
	if testing.Short() {
		t.Skip("stress")
	}
	for _, tcp := range []bool{false, true} {
		g := runtime.NumGoroutine()
		cfg := Config{InitialStreamWindow: 32 << 10, InitialConnWindow: 128 << 10, MaxConcurrentStreams: 8, DisableBDP: true}
		p := newPair(t, cfg, cfg, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, tcp)
		// The server's SETTINGS (MAX_CONCURRENT_STREAMS 8) must be known
		// before the burst, else early streams are refused.
		roundTrip(t, p.client, p.pool, []byte("warm"))
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 7))
				for range 12 {
					size := r.IntN(200 << 10)
					payload := make([]byte, size)
					for i := range payload {
						payload[i] = byte(r.Uint32())
					}
					if r.IntN(4) == 0 {
						s, err := p.client.NewStream(context.Background(), reqFields("/reset"), StreamOptions{})
						if err != nil {
							t.Error(err)
							return
						}
						s.Send(DataItem(p.pool.Copy(payload[:size/2]), false))
						s.Reset(h2frame.ErrCodeCancel)
						s.Release()
						continue
					}
					s, err := p.client.NewStream(context.Background(), reqFields("/echo"), StreamOptions{})
					if err != nil {
						t.Error(err)
						return
					}
					// Write in chunks while a reader drains the echo.
					done := make(chan []byte, 1)
					go func() {
						var got []byte
						if _, _, err := s.RecvHeaders(); err != nil {
							done <- nil
							return
						}
						for {
							b, err := s.Recv()
							if err == io.EOF {
								break
							}
							if err != nil {
								break
							}
							got = append(got, b.Bytes()...)
							b.Free()
						}
						done <- got
					}()
					for off := 0; off < size; {
						n := min(size-off, 1+r.IntN(64<<10))
						if err := s.Send(DataItem(p.pool.Copy(payload[off:off+n]), false)); err != nil {
							t.Error(err)
							break
						}
						off += n
					}
					s.Send(DataItem(nil, true))
					if got := <-done; !bytes.Equal(got, payload) {
						t.Errorf("echo of %d bytes came back as %d bytes", size, len(got))
					}
					s.Release()
				}
			}()
		}
		wg.Wait()
		p.close(t)
		checkLeaks(t, p.pool, g)
	}
}
