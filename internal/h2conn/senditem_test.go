package h2conn

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// newExchange opens a stream whose request ended on a new pair (the client
// configured by ccfg) and returns both sides of it, with the goroutine
// count before, for checkLeaks.
func newExchange(t *testing.T, ccfg Config) (p *pair, client, server *Stream, goroutines int) {
	t.Helper()
	goroutines = runtime.NumGoroutine()
	got := make(chan *Stream, 1)
	p = newPair(t, ccfg, Config{}, func(*bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) { got <- s }) }, false)
	client, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	return p, client, <-got, goroutines
}

// HeadersDataItem sends the response headers and a message as one item:
// held, it and the trailers leave in one write; not held, in two.
func TestHeadersDataBatchesWrites(t *testing.T) {
	for _, hold := range []bool{false, true} {
		x := newCountedExchange(t)
		if err := x.ss.Send(holding(HeadersDataItem(respFields, x.pool.Copy([]byte("reply")), false), hold)); err != nil || !x.ss.HeadersSent() {
			t.Fatalf("HeadersDataItem: headers sent %v, %v", x.ss.HeadersSent(), err)
		}
		if err := x.ss.Send(TrailersItem(trailerFields)); err != nil {
			t.Fatal(err)
		}
		want := 2
		if hold {
			want = 1
		}
		if n := x.writes(); n != want {
			t.Errorf("hold=%v: %d writes for headers+data+trailers, want %d", hold, n, want)
		}
		x.recvResponse(t, "reply")
		x.close(t)
	}
}

// A message larger than the client's stream window: HeadersDataItem's
// Send returns once the headers are out and the windows hold the rest back, and
// the trailers' write waits for the message, which arrives whole as the
// client reads.
func TestHeadersDataBeyondWindow(t *testing.T) {
	p, s, ss, g := newExchange(t, Config{InitialStreamWindow: 1 << 16})
	body := bytes.Repeat([]byte("leangrpc"), 40000) // 320 KB: beyond the stream window
	wrote := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		err := ss.Send(HeadersDataItem(respFields, p.pool.Copy(body), false))
		close(returned)
		if err != nil {
			wrote <- err
			return
		}
		wrote <- ss.Send(TrailersItem(trailerFields))
	}()
	// A hang fails the test: the connections close and every wait ends.
	watchdog := time.AfterFunc(10*time.Second, func() { p.client.Close(); p.server.Close() })
	defer watchdog.Stop()
	<-returned                        // before the client reads: the message waits for window
	time.Sleep(10 * time.Millisecond) // and the trailers for the message
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	recv, err := recvAll(s)
	if err != nil {
		t.Fatalf("Recv after %d bytes: %v", len(recv), err)
	}
	if !bytes.Equal(recv, body) {
		t.Fatalf("got %d bytes, want %d", len(recv), len(body))
	}
	if err := <-wrote; err != nil {
		t.Fatalf("server writes: %v", err)
	}
	s.Release()
	ss.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// The client resets the stream while the message waits for window: the
// send after HeadersDataItem's reports it, and the message's buffer is
// freed.
func TestHeadersDataResetWhileBlocked(t *testing.T) {
	p, s, ss, g := newExchange(t, Config{InitialStreamWindow: 1 << 16})
	body := bytes.Repeat([]byte("leangrpc"), 40000)
	if err := ss.Send(HeadersDataItem(respFields, p.pool.Copy(body), false)); err != nil || !ss.HeadersSent() {
		t.Fatalf("HeadersDataItem: headers sent %v, %v", ss.HeadersSent(), err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	s.Reset(h2frame.ErrCodeCancel) // reading nothing: the message stays held back
	if err := ss.Send(TrailersItem(trailerFields)); err == nil {
		t.Fatal("the trailers' Send after the peer's reset succeeded")
	}
	s.Release()
	ss.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// Misuse: a header list over the peer's limit fails as HeadersItem does,
// and after the response headers HeadersDataItem fails with
// ErrTrailersMustEnd; either sends nothing and frees the buffer.
func TestHeadersDataMisuse(t *testing.T) {
	p, s, ss, g := newExchange(t, Config{MaxHeaderListSize: 1024})
	big := append([]hpack.HeaderField{}, respFields...)
	big = append(big, hpack.HeaderField{Name: "x-big", Value: string(make([]byte, 2048))})
	var hl *HeaderListTooLargeError
	if err := ss.Send(HeadersDataItem(big, p.pool.Copy([]byte("x")), false)); !errors.As(err, &hl) || ss.HeadersSent() {
		t.Errorf("HeadersDataItem over the peer's header list limit: headers sent %v, %v", ss.HeadersSent(), err)
	}
	if err := ss.Send(HeadersItem(respFields, false)); err != nil {
		t.Fatal(err)
	}
	if err := ss.Send(HeadersDataItem(respFields, p.pool.Copy([]byte("x")), false)); !errors.Is(err, ErrTrailersMustEnd) {
		t.Errorf("HeadersDataItem after the headers: %v", err)
	}
	if err := ss.Send(TrailersItem(trailerFields)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("Recv: %v (a DATA frame went out?)", err)
	}
	s.Release()
	ss.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// ResponseItem sends headers, a message and the trailers as one item, in
// one write, and the client reads them in that order.
func TestResponseOneWrite(t *testing.T) {
	for _, body := range []string{"reply", ""} {
		x := newCountedExchange(t)
		if err := x.ss.Send(ResponseItem(respFields, x.pool.Copy([]byte(body)), trailerFields)); err != nil {
			t.Fatalf("ResponseItem: %v", err)
		}
		if n := x.writes(); n != 1 {
			t.Errorf("%d writes for headers, data and trailers, want 1", n)
		}
		x.recvResponse(t, body)
		if tr := x.s.Trailers(); len(tr) != len(trailerFields) || tr[0] != trailerFields[0] {
			t.Fatalf("trailers %v, want %v", tr, trailerFields)
		}
		x.close(t)
	}
}

// A message larger than the client's stream window: ResponseItem's Send waits
// until the whole item, trailers included, is encoded (they are borrowed
// until then), and the client gets all of it.
func TestResponseBeyondWindow(t *testing.T) {
	p, s, ss, g := newExchange(t, Config{InitialStreamWindow: 1 << 16})
	body := bytes.Repeat([]byte("leangrpc"), 40000) // 320 KB: beyond the stream window
	trailers := append([]hpack.HeaderField(nil), trailerFields...)
	wrote := make(chan error, 1)
	go func() {
		err := ss.Send(ResponseItem(respFields, p.pool.Copy(body), trailers))
		clear(trailers) // borrowed only until Send returns
		wrote <- err
	}()
	watchdog := time.AfterFunc(10*time.Second, func() { p.client.Close(); p.server.Close() })
	defer watchdog.Stop()
	time.Sleep(10 * time.Millisecond)
	select {
	case err := <-wrote:
		t.Fatalf("Send returned (%v) while the window held the message back", err)
	default:
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	recv, err := recvAll(s)
	if err != nil {
		t.Fatalf("Recv after %d bytes: %v", len(recv), err)
	}
	if !bytes.Equal(recv, body) {
		t.Fatalf("got %d bytes, want %d", len(recv), len(body))
	}
	if tr := s.Trailers(); len(tr) != len(trailerFields) || tr[0] != trailerFields[0] {
		t.Fatalf("trailers %v, want %v", tr, trailerFields)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("Send: %v", err)
	}
	s.Release()
	ss.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// asyncResponder is newExchange that returns once the server saw the
// request's END_STREAM.
func asyncResponder(t *testing.T) (p *pair, client, server *Stream, goroutines int) {
	t.Helper()
	p, client, server, goroutines = newExchange(t, Config{})
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.server.mu.Lock()
		st := server.state
		p.server.mu.Unlock()
		if st == stateHalfClosedRemote {
			return p, client, server, goroutines
		}
		if time.Now().After(deadline) {
			t.Fatalf("server stream in state %v, want half-closed (remote)", st)
		}
		time.Sleep(time.Millisecond)
	}
}

// A handed-over ResponseItem's Send returns at once while another
// goroutine holds the write role, from copies of its fields; Release then
// does not wait (the item is orphaned), and the response arrives whole once
// the role's holder writes, after which the stream is back in the free
// list.
func TestResponseHandedOver(t *testing.T) {
	p, s, ss, g := asyncResponder(t)
	giveBack := holdWriteRole(p.server)
	hdrs := append([]hpack.HeaderField(nil), respFields...)
	trls := append([]hpack.HeaderField(nil), trailerFields...)
	done := make(chan error, 1)
	go func() {
		done <- ss.Send(handedOver(ResponseItem(hdrs, p.pool.Copy([]byte("reply")), trls)))
		ss.Release()
		close(done)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		<-done // and Release returned too
	case <-time.After(5 * time.Second):
		t.Fatal("Send or Release waited for the write role's holder")
	}
	clear(hdrs) // the engine took copies
	clear(trls)
	giveBack()
	h, _, err := s.RecvHeaders()
	if err != nil || len(h) == 0 || h[0].Value != "200" {
		t.Fatalf("RecvHeaders %v %v", h, err)
	}
	b, err := s.Recv()
	if err != nil || string(b.Bytes()) != "reply" {
		t.Fatalf("Recv %v", err)
	}
	b.Free()
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("Recv end: %v", err)
	}
	if tr := s.Trailers(); len(tr) != len(trailerFields) || tr[0] != trailerFields[0] {
		t.Fatalf("trailers %v, want %v", tr, trailerFields)
	}
	p.server.mu.Lock()
	recycled := slices.Contains(p.server.freeStreams, ss)
	p.server.mu.Unlock()
	if !recycled {
		t.Error("the released stream is not back in the free list once its response went out")
	}
	s.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// The client resets the stream while its released response waits for the
// write role: the message's buffer is freed, and nothing is sent for it.
func TestResponseHandedOverReset(t *testing.T) {
	p, s, ss, g := asyncResponder(t)
	giveBack := holdWriteRole(p.server)
	if err := ss.Send(handedOver(ResponseItem(respFields, p.pool.Copy([]byte("reply")), trailerFields))); err != nil {
		t.Fatal(err)
	}
	ss.Release()
	s.Reset(h2frame.ErrCodeCancel)
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.server.mu.Lock()
		failed := ss.err != nil
		p.server.mu.Unlock()
		if failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never saw the reset")
		}
		time.Sleep(time.Millisecond)
	}
	giveBack()
	s.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}
