package h2conn

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// finishStream sends END_STREAM on s and reads the echo to its end.
func finishStream(t *testing.T, s *Stream) {
	t.Helper()
	if err := s.Send(DataItem(nil, true)); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatalf("RecvHeaders: %v", err)
	}
	for {
		b, err := s.Recv()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		b.Free()
	}
}

// With many streams sending at once the writer corks: their messages
// share syscalls instead of taking one write each.
func TestCorkBatchesConcurrentSenders(t *testing.T) {
	g := runtime.NumGoroutine()
	pool := bufpool.New(nil)
	raw, sn := h2test.TCPPair(t)
	cc := &countConn{Conn: raw}
	srv := NewServerConn(sn, Config{Pool: pool}, echoHandler(t, pool))
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	cl, err := NewClientConn(cc, Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	const senders, msgs = 40, 50
	streams := make([]*Stream, senders)
	for i := range streams {
		if streams[i], err = cl.NewStream(context.Background(), reqFields("/x"), StreamOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := cc.count()
	var wg sync.WaitGroup
	start := make(chan struct{})
	payload := make([]byte, 100)
	for _, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range msgs {
				if err := s.Send(DataItem(pool.Copy(payload), false)); err != nil {
					t.Errorf("WriteData: %v", err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	writes := cc.count() - before
	t.Logf("%d writes", writes)
	if total := senders * msgs; writes > total/3 {
		t.Errorf("%d writes for %d messages on %d busy streams, want at most %d", writes, total, senders, total/3)
	}
	for _, s := range streams {
		finishStream(t, s)
		s.Release()
	}
	cl.Close()
	srv.Close()
	<-cl.Done()
	<-srv.Done()
	<-serveErr
	checkLeaks(t, pool, g)
}

// holdWriteRole makes the connection look busy writing, as when another
// goroutine holds the write role; the returned func writes what was queued
// meanwhile and gives the role back.
func holdWriteRole(c *Conn) (release func()) {
	c.mu.Lock()
	for c.writing {
		c.idleCond.Wait(&c.mu)
	}
	c.writing = true
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.writeLoop(nil)
		c.mu.Unlock()
	}
}

// While another goroutine holds the write role, WriteData leaves its item
// in the send slot and returns; the holder sends it, and the stream's next
// write waits for it, so order is kept.
func TestWriteDataAsyncWhileRoleHeld(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release := holdWriteRole(p.client)
	if err := s.Send(DataItem(p.pool.Copy([]byte("first,")), false)); err != nil {
		t.Fatal(err)
	}
	p.client.mu.Lock()
	st := s.slot.state
	p.client.mu.Unlock()
	if st != slotDetached {
		t.Fatalf("DataItem with the role held elsewhere: slot %v, want detached", st)
	}
	second := make(chan error, 1)
	go func() { second <- s.Send(DataItem(p.pool.Copy([]byte("second")), true)) }()
	release()
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "first,second" {
		t.Errorf("echo %q, want %q", got, "first,second")
	}
	s.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// An item left in the send slot is freed when the stream fails before the
// writer gets to it, and the next write reports the failure.
func TestWriteDataAsyncThenReset(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release := holdWriteRole(p.client)
	if err := s.Send(DataItem(p.pool.Copy([]byte("dropped")), false)); err != nil {
		t.Fatal(err)
	}
	s.Reset(h2frame.ErrCodeCancel)
	p.client.mu.Lock()
	pending := s.slot.pending() || s.slot.item.Data != nil
	p.client.mu.Unlock()
	if pending {
		t.Error("the reset stream still holds its unsent item")
	}
	release()
	if err := s.Send(DataItem(p.pool.Copy([]byte("late")), true)); err == nil {
		t.Error("WriteData after the reset succeeded")
	}
	s.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// Release after a WriteData that returned at once still sends its payload.
func TestReleaseSendsAsyncItem(t *testing.T) {
	g := runtime.NumGoroutine()
	got := make(chan string, 1)
	h := func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) {
			go func() {
				var data []byte
				for {
					b, err := s.Recv()
					if err != nil {
						if err != io.EOF {
							data = append(data, "<"+err.Error()+">"...)
						}
						break
					}
					data = append(data, b.Bytes()...)
					b.Free()
				}
				got <- string(data)
				s.Release()
			}()
		})
	}
	p := newPair(t, Config{}, Config{}, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release := holdWriteRole(p.client)
	if err := s.Send(DataItem(p.pool.Copy([]byte("last words")), true)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		s.Release()
		close(done)
	}()
	// Let Release park on the pending item before the role comes back.
	deadline := time.Now().Add(5 * time.Second)
	for parked := false; !parked; {
		select {
		case <-done:
			release()
			t.Fatal("Release returned without waiting for the pending item")
		default:
		}
		if time.Now().After(deadline) {
			release()
			t.Fatal("Release did not wait for the pending item")
		}
		p.client.mu.Lock()
		parked = s.slot.parked
		p.client.mu.Unlock()
		runtime.Gosched()
	}
	release()
	<-done
	if d := <-got; d != "last words" {
		t.Errorf("server received %q, want %q", d, "last words")
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// A wakeBatch wakes every sender it was given exactly once: those past its
// capacity at once, the others at wake; senders not parked are skipped.
func TestWakeBatch(t *testing.T) {
	var wb wakeBatch
	n := len(wb.ch) + 8
	streams := make([]*Stream, n)
	for i := range streams {
		streams[i] = &Stream{sendCh: make(chan struct{}, 1), slot: sendSlot{parked: i != 3}}
		wb.add(streams[i])
	}
	for i, s := range streams[len(wb.ch)+1:] {
		if len(s.sendCh) != 1 {
			t.Fatalf("sender %d past the batch's capacity not woken at once", len(wb.ch)+1+i)
		}
	}
	if len(streams[0].sendCh) != 0 {
		t.Fatal("sender woken before wake")
	}
	wb.wake()
	for i, s := range streams {
		want := 1
		if i == 3 {
			want = 0
		}
		if len(s.sendCh) != want {
			t.Errorf("sender %d: %d tokens after wake, want %d", i, len(s.sendCh), want)
		}
	}
	if wb.n != 0 {
		t.Errorf("batch holds %d after wake", wb.n)
	}
}

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
				s.Send(HeadersItem(respFields, false))
				done := make(chan error, 1)
				go func() { done <- s.Send(DataItem(pool.Copy(payload), false)) }()
				// Wait until the first write waits for window.
				for {
					s.conn.mu.Lock()
					parked := s.slot.sender && s.slot.parked
					s.conn.mu.Unlock()
					if parked {
						break
					}
					time.Sleep(time.Millisecond)
				}
				errs <- [2]error{s.Send(DataItem(pool.Copy([]byte("second")), false)), s.Send(TrailersItem(trailerFields))}
				if err := <-done; err != nil {
					t.Errorf("first WriteData: %v", err)
				}
				s.Send(TrailersItem(trailerFields))
			}()
		})
	}
	p := newPair(t, Config{InitialStreamWindow: 65535, InitialConnWindow: 1 << 20}, Config{}, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{EndStream: true})
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
