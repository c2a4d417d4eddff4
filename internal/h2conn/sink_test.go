package h2conn

import (
	"context"
	"io"
	"runtime"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// TestTrailersEndSinkRegistration: a receiver gathering into a buffer
// (RecvInto) whose range the peer's DATA does not fill, ended by trailers,
// leaves no reference of the registration behind, without a Release (a
// streaming gRPC call never releases its stream).
func TestTrailersEndSinkRegistration(t *testing.T) {
	g := runtime.NumGoroutine()
	h := func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) {
			go func() {
				s.Send(HeadersItem(respFields, false))
				s.Send(DataItem(pool.Copy(make([]byte, 100)), false))
				s.Send(TrailersItem(trailerFields))
			}()
		})
	}
	p := newPair(t, Config{}, Config{}, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	dst := p.pool.Get(1000)
	got := 0
	for {
		b, n, err := s.RecvInto(dst, got, dst.Len())
		got += n
		if b != nil {
			got += copy(dst.Bytes()[got:], b.Bytes())
			b.Free()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("RecvInto: %v", err)
		}
	}
	if got != 100 {
		t.Errorf("received %d bytes, want 100", got)
	}
	dst.Free() // the receiver's reference
	<-s.Done()
	p.close(t)
	checkLeaks(t, p.pool, g)
}
