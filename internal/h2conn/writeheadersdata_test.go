package h2conn

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// WriteHeadersData sends the response headers and a message as one item:
// with HoldFlush, it and the trailers leave in one write; without, in two.
func TestWriteHeadersDataBatchesWrites(t *testing.T) {
	for _, hold := range []bool{false, true} {
		g := runtime.NumGoroutine()
		pool := bufpool.New(nil)
		cn, sn := net.Pipe()
		cc := &countConn{Conn: sn}
		respond := make(chan *Stream, 1)
		srv := NewServerConn(cc, Config{Pool: pool}, HandlerFunc(func(s *Stream) { respond <- s }))
		serveErr := make(chan error, 1)
		go func() { serveErr <- srv.Serve() }()
		cl, err := NewClientConn(cn, Config{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		s, err := cl.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
		if err != nil {
			t.Fatal(err)
		}
		ss := <-respond
		// Let the server's own SETTINGS, ACKs and WINDOW_UPDATE go out.
		time.Sleep(20 * time.Millisecond)
		before := cc.count()
		if hold {
			ss.HoldFlush()
		}
		if sent, err := ss.WriteHeadersData(respFields, pool.Copy([]byte("reply")), false); err != nil || !sent {
			t.Fatalf("WriteHeadersData: headers sent %v, %v", sent, err)
		}
		if err := ss.WriteTrailers(trailerFields); err != nil {
			t.Fatal(err)
		}
		want := 2
		if hold {
			want = 1
		}
		if n := cc.count() - before; n != want {
			t.Errorf("hold=%v: %d writes for headers+data+trailers, want %d", hold, n, want)
		}
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
		s.Release()
		ss.Release()
		cl.Close()
		srv.Close()
		<-cl.Done()
		<-srv.Done()
		<-serveErr
		checkLeaks(t, pool, g)
	}
}

// A message larger than the client's stream window: WriteHeadersData
// returns once the headers are out and the windows hold the rest back, and
// the trailers' write waits for the message, which arrives whole as the
// client reads.
func TestWriteHeadersDataBeyondWindow(t *testing.T) {
	g := runtime.NumGoroutine()
	got := make(chan *Stream, 1)
	p := newPair(t, Config{InitialStreamWindow: 1 << 16}, Config{}, func(*bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) { got <- s }) }, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	ss := <-got
	body := bytes.Repeat([]byte("leangrpc"), 40000) // 320 KB: beyond the stream window
	wrote := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		_, err := ss.WriteHeadersData(respFields, p.pool.Copy(body), false)
		close(returned)
		if err != nil {
			wrote <- err
			return
		}
		wrote <- ss.WriteTrailers(trailerFields)
	}()
	// A hang fails the test: the connections close and every wait ends.
	watchdog := time.AfterFunc(10*time.Second, func() { p.client.Close(); p.server.Close() })
	defer watchdog.Stop()
	<-returned                        // before the client reads: the message waits for window
	time.Sleep(10 * time.Millisecond) // and the trailers for the message
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	var recv []byte
	for {
		b, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv after %d bytes: %v", len(recv), err)
		}
		recv = append(recv, b.Bytes()...)
		b.Free()
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
// write after WriteHeadersData reports it, and the message's buffer is
// freed.
func TestWriteHeadersDataResetWhileBlocked(t *testing.T) {
	g := runtime.NumGoroutine()
	got := make(chan *Stream, 1)
	p := newPair(t, Config{InitialStreamWindow: 1 << 16}, Config{}, func(*bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) { got <- s }) }, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	ss := <-got
	body := bytes.Repeat([]byte("leangrpc"), 40000)
	if sent, err := ss.WriteHeadersData(respFields, p.pool.Copy(body), false); err != nil || !sent {
		t.Fatalf("WriteHeadersData: headers sent %v, %v", sent, err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	s.Reset(h2frame.ErrCodeCancel) // reading nothing: the message stays held back
	if err := ss.WriteTrailers(trailerFields); err == nil {
		t.Fatal("WriteTrailers after the peer's reset succeeded")
	}
	s.Release()
	ss.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// Misuse: a header list over the peer's limit fails as WriteHeaders does,
// and after the response headers WriteHeadersData fails with
// ErrTrailersMustEnd; either sends nothing and frees the buffer.
func TestWriteHeadersDataMisuse(t *testing.T) {
	g := runtime.NumGoroutine()
	got := make(chan *Stream, 1)
	p := newPair(t, Config{MaxHeaderListSize: 1024}, Config{}, func(*bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) { got <- s }) }, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	ss := <-got
	big := append([]hpack.HeaderField{}, respFields...)
	big = append(big, hpack.HeaderField{Name: "x-big", Value: string(make([]byte, 2048))})
	var hl *HeaderListTooLargeError
	if sent, err := ss.WriteHeadersData(big, p.pool.Copy([]byte("x")), false); !errors.As(err, &hl) || sent {
		t.Errorf("WriteHeadersData over the peer's header list limit: headers sent %v, %v", sent, err)
	}
	if err := ss.WriteHeaders(respFields, false); err != nil {
		t.Fatal(err)
	}
	if sent, err := ss.WriteHeadersData(respFields, p.pool.Copy([]byte("x")), false); !errors.Is(err, ErrTrailersMustEnd) || sent {
		t.Errorf("WriteHeadersData after the headers: headers sent %v, %v", sent, err)
	}
	if err := ss.WriteTrailers(trailerFields); err != nil {
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

// WriteResponse sends headers, a message and the trailers as one item, in
// one write, and the client reads them in that order.
func TestWriteResponseOneWrite(t *testing.T) {
	for _, body := range []string{"reply", ""} {
		g := runtime.NumGoroutine()
		pool := bufpool.New(nil)
		cn, sn := net.Pipe()
		cc := &countConn{Conn: sn}
		respond := make(chan *Stream, 1)
		srv := NewServerConn(cc, Config{Pool: pool}, HandlerFunc(func(s *Stream) { respond <- s }))
		serveErr := make(chan error, 1)
		go func() { serveErr <- srv.Serve() }()
		cl, err := NewClientConn(cn, Config{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		s, err := cl.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
		if err != nil {
			t.Fatal(err)
		}
		ss := <-respond
		time.Sleep(20 * time.Millisecond) // the server's SETTINGS and ACKs go out
		before := cc.count()
		if sent, err := ss.WriteResponse(respFields, pool.Copy([]byte(body)), trailerFields); err != nil || !sent {
			t.Fatalf("WriteResponse: headers sent %v, %v", sent, err)
		}
		if n := cc.count() - before; n != 1 {
			t.Errorf("%d writes for headers, data and trailers, want 1", n)
		}
		h, _, err := s.RecvHeaders()
		if err != nil || len(h) == 0 || h[0].Value != "200" {
			t.Fatalf("RecvHeaders %v %v", h, err)
		}
		if body != "" {
			b, err := s.Recv()
			if err != nil || string(b.Bytes()) != body {
				t.Fatalf("Recv %v", err)
			}
			b.Free()
		}
		if _, err := s.Recv(); err != io.EOF {
			t.Fatalf("Recv end: %v", err)
		}
		if tr := s.Trailers(); len(tr) != len(trailerFields) || tr[0] != trailerFields[0] {
			t.Fatalf("trailers %v, want %v", tr, trailerFields)
		}
		s.Release()
		ss.Release()
		cl.Close()
		srv.Close()
		<-cl.Done()
		<-srv.Done()
		<-serveErr
		checkLeaks(t, pool, g)
	}
}

// A message larger than the client's stream window: WriteResponse waits
// until the whole item, trailers included, is encoded (they are borrowed
// until then), and the client gets all of it.
func TestWriteResponseBeyondWindow(t *testing.T) {
	g := runtime.NumGoroutine()
	got := make(chan *Stream, 1)
	p := newPair(t, Config{InitialStreamWindow: 1 << 16}, Config{}, func(*bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) { got <- s }) }, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	ss := <-got
	body := bytes.Repeat([]byte("leangrpc"), 40000) // 320 KB: beyond the stream window
	trailers := append([]hpack.HeaderField(nil), trailerFields...)
	wrote := make(chan error, 1)
	go func() {
		_, err := ss.WriteResponse(respFields, p.pool.Copy(body), trailers)
		clear(trailers) // borrowed only until WriteResponse returns
		wrote <- err
	}()
	watchdog := time.AfterFunc(10*time.Second, func() { p.client.Close(); p.server.Close() })
	defer watchdog.Stop()
	time.Sleep(10 * time.Millisecond)
	select {
	case err := <-wrote:
		t.Fatalf("WriteResponse returned (%v) while the window held the message back", err)
	default:
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	var recv []byte
	for {
		b, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv after %d bytes: %v", len(recv), err)
		}
		recv = append(recv, b.Bytes()...)
		b.Free()
	}
	if !bytes.Equal(recv, body) {
		t.Fatalf("got %d bytes, want %d", len(recv), len(body))
	}
	if tr := s.Trailers(); len(tr) != len(trailerFields) || tr[0] != trailerFields[0] {
		t.Fatalf("trailers %v, want %v", tr, trailerFields)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("WriteResponse: %v", err)
	}
	s.Release()
	ss.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// asyncResponder opens a stream whose request has ended and returns it
// with the server's side of it, once the server saw the END_STREAM.
func asyncResponder(t *testing.T, p *pair, got chan *Stream) (client, server *Stream) {
	t.Helper()
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
	if err != nil {
		t.Fatal(err)
	}
	ss := <-got
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.server.mu.Lock()
		st := ss.state
		p.server.mu.Unlock()
		if st == stateHalfClosedRemote {
			return s, ss
		}
		if time.Now().After(deadline) {
			t.Fatalf("server stream in state %v, want half-closed (remote)", st)
		}
		time.Sleep(time.Millisecond)
	}
}

// WriteResponseAsync returns at once while another goroutine holds the
// write role, from copies of its fields; Release then does not wait, and
// the response arrives whole once the role's holder writes, after which
// the stream is back in the free list.
func TestWriteResponseAsync(t *testing.T) {
	g := runtime.NumGoroutine()
	got := make(chan *Stream, 1)
	p := newPair(t, Config{}, Config{}, func(*bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) { got <- s }) }, false)
	s, ss := asyncResponder(t, p, got)
	giveBack := holdWriteRole(p.server)
	hdrs := append([]hpack.HeaderField(nil), respFields...)
	trls := append([]hpack.HeaderField(nil), trailerFields...)
	done := make(chan error, 1)
	go func() {
		done <- ss.WriteResponseAsync(hdrs, p.pool.Copy([]byte("reply")), trls)
		ss.Release()
		close(done)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WriteResponseAsync: %v", err)
		}
		<-done // and Release returned too
	case <-time.After(5 * time.Second):
		t.Fatal("WriteResponseAsync or Release waited for the write role's holder")
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
func TestWriteResponseAsyncReset(t *testing.T) {
	g := runtime.NumGoroutine()
	got := make(chan *Stream, 1)
	p := newPair(t, Config{}, Config{}, func(*bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) { got <- s }) }, false)
	s, ss := asyncResponder(t, p, got)
	giveBack := holdWriteRole(p.server)
	if err := ss.WriteResponseAsync(respFields, p.pool.Copy([]byte("reply")), trailerFields); err != nil {
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
