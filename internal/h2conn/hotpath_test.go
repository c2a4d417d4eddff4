package h2conn

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// finishStream sends END_STREAM on s and reads the echo to its end.
func finishStream(t *testing.T, s *Stream) {
	t.Helper()
	if err := s.CloseSend(); err != nil {
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

func freeStreamCount(c *Conn) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.freeStreams)
}

// A busy connection keeps up to maxFreeStreams released streams for
// reuse (more than the 32 it used to, so 120 calls in flight do not
// allocate); once idle it keeps at most idleFreeStreams.
func TestStreamFreeListBusyAndIdle(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	ctx := context.Background()
	keeper, err := p.client.NewStream(ctx, reqFields("/keep"), false)
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	streams := make([]*Stream, n)
	for i := range streams {
		if streams[i], err = p.client.NewStream(ctx, reqFields("/x"), false); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range streams {
		finishStream(t, s)
		s.Release()
	}
	if got := freeStreamCount(p.client); got != n {
		t.Errorf("busy connection keeps %d released streams, want %d", got, n)
	}
	// Reuse: the next streams come from the free list.
	again, err := p.client.NewStream(ctx, reqFields("/y"), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := freeStreamCount(p.client); got != n-1 {
		t.Errorf("after NewStream %d free streams, want %d", got, n-1)
	}
	finishStream(t, again)
	again.Release()
	finishStream(t, keeper)
	keeper.Release()
	if got := freeStreamCount(p.client); got > idleFreeStreams {
		t.Errorf("idle connection keeps %d released streams, want at most %d", got, idleFreeStreams)
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// With many streams sending at once the writer corks: their messages
// share syscalls instead of taking one write each.
func TestCorkBatchesConcurrentSenders(t *testing.T) {
	g := runtime.NumGoroutine()
	pool := bufpool.New(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sn := <-ch
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
		if streams[i], err = cl.NewStream(context.Background(), reqFields("/x"), false); err != nil {
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
				if err := s.WriteData(pool.Copy(payload), false); err != nil {
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
