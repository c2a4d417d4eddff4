package h2conn

import (
	"context"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

func TestOutflow(t *testing.T) {
	var f outflow
	f.n = 100
	f.take(60)
	if f.avail() != 40 {
		t.Fatalf("avail %d", f.avail())
	}
	if !f.add(-100) || f.avail() != 0 || f.n != -60 {
		t.Fatalf("negative window: n=%d avail=%d", f.n, f.avail())
	}
	if !f.add(h2frame.MaxWindowSize) {
		t.Fatal("add within limit refused")
	}
	f.n = h2frame.MaxWindowSize
	if f.add(1) || f.n != h2frame.MaxWindowSize {
		t.Fatal("overflow past 2^31-1 accepted")
	}
}

func TestInflow(t *testing.T) {
	var f inflow
	f.init(1000)
	if !f.take(1000) || f.take(1) {
		t.Fatal("window accounting wrong")
	}
	// The peer is out of window: even a small credit goes out at once.
	if inc := f.credit(10, 1000); inc != 10 {
		t.Fatalf("credit to a stalled peer sent %d, want 10", inc)
	}
	f.init(1000)
	f.take(100)
	// Batched: nothing until a quarter of the window is owed.
	if inc := f.credit(100, 1000); inc != 0 {
		t.Fatalf("credit 100/1000 sent %d", inc)
	}
	if inc := f.credit(150, 1000); inc != 250 {
		t.Fatalf("credit to 250/1000 sent %d, want 250", inc)
	}
	if f.avail != 1150 || f.unsent != 0 {
		t.Fatalf("after update avail=%d unsent=%d", f.avail, f.unsent)
	}
	// widen opens the window for a whole message at once.
	if inc := f.widen(5000); inc != 3850 || f.avail != 5000 {
		t.Fatalf("widen: inc=%d avail=%d", inc, f.avail)
	}
	if inc := f.widen(100); inc != 0 {
		t.Fatalf("widen below avail sent %d", inc)
	}
	// Never above 2^31-1.
	f.init(h2frame.MaxWindowSize - 10)
	f.take(5)
	if inc := f.widen(1 << 40); int64(inc)+f.avail-int64(inc) > h2frame.MaxWindowSize || f.avail != h2frame.MaxWindowSize {
		t.Fatalf("widen overflow: inc=%d avail=%d", inc, f.avail)
	}
}

func TestBDPEstimator(t *testing.T) {
	b := bdpEstimator{window: 1 << 16, limit: 1 << 18}
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	// Small RPCs: nothing until a window's worth arrived.
	for range 60 {
		now = now.Add(time.Millisecond)
		if ping, grown := b.onData(1000, clock); ping || grown != 0 {
			t.Fatal("pinged or grew before a window's worth of data")
		}
	}
	// A window's worth: the first PING (no RTT known yet, no growth).
	if ping, grown := b.onData(1<<16, clock); !ping || grown != 0 {
		t.Fatalf("after a window: ping=%v grown=%d", ping, grown)
	}
	now = now.Add(10 * time.Millisecond)
	b.onAck(now)
	if b.rtt != 10*time.Millisecond {
		t.Fatalf("rtt %v", b.rtt)
	}
	// The next window arrives within two RTTs: window-limited, it doubles.
	now = now.Add(5 * time.Millisecond)
	ping, grown := b.onData(1<<16, clock)
	if grown != 1<<17 {
		t.Fatalf("grown = %d, want %d", grown, 1<<17)
	}
	if ping {
		t.Fatal("pinged again within the minimum interval")
	}
	// A window that takes longer than two RTTs: the link is the limit.
	now = now.Add(100 * time.Millisecond)
	if _, grown := b.onData(1<<17, clock); grown != 0 {
		t.Fatalf("grew to %d on a slow window", grown)
	}
	// Growth stops at the limit; at the limit nothing is sampled.
	now = now.Add(time.Millisecond)
	if _, grown := b.onData(1<<17, clock); grown != 1<<18 {
		t.Fatalf("grown = %d, want the limit", grown)
	}
	if ping, grown := b.onData(1<<30, clock); ping || grown != 0 {
		t.Fatal("sampled at the limit")
	}
}

// A server response completed before the request: RST_STREAM(NO_ERROR),
// and the client still reads the whole response.
func TestServerRespondsBeforeRequestEnds(t *testing.T) {
	g := runtime.NumGoroutine()
	h := func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) {
			go func() {
				s.Send(HeadersItem(respFields, false))
				s.Send(DataItem(pool.Copy([]byte("early")), false))
				s.Send(TrailersItem(trailerFields))
			}()
		})
	}
	p := newPair(t, Config{}, Config{}, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		b, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		got = append(got, b.Bytes()...)
		b.Free()
	}
	if string(got) != "early" {
		t.Fatalf("got %q", got)
	}
	<-s.Done()
	s.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// ExpectMessage opens the stream window for a whole message at once: a
// message larger than the window arrives without the receiver reading.
func TestExpectMessage(t *testing.T) {
	g := runtime.NumGoroutine()
	got := make(chan *Stream, 1)
	h := func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) { got <- s })
	}
	cfg := Config{InitialStreamWindow: 65535, DisableBDP: true}
	p := newPair(t, Config{}, cfg, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ss := <-got
	ss.ExpectMessage(1 << 20)
	sent := make(chan error, 1)
	go func() { sent <- s.Send(DataItem(p.pool.Get(1<<20), true)) }()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("1 MiB message stalled on a 64 KiB window despite ExpectMessage")
	}
	n := 0
	for {
		b, err := ss.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n += b.Len()
		b.Free()
	}
	if n != 1<<20 {
		t.Fatalf("received %d bytes", n)
	}
	s.Release()
	ss.Release()
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// No head-of-line blocking: streams whose handlers never read hold their
// stream windows, but the connection window is given back on receipt, so a
// stream that reads still gets all its data.
func TestNoHeadOfLineBlocking(t *testing.T) {
	g := runtime.NumGoroutine()
	const connWindow = 256 << 10
	var held []*Stream
	var mu sync.Mutex
	h := func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) {
			mu.Lock()
			held = append(held, s)
			mu.Unlock()
		})
	}
	p := newPair(t, Config{}, Config{InitialConnWindow: connWindow, InitialStreamWindow: 128 << 10, DisableBDP: true}, h, false)
	var wg sync.WaitGroup
	var streams []*Stream
	for range 16 {
		s, err := p.client.NewStream(context.Background(), reqFields("/sink"), StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Send(DataItem(p.pool.Get(1<<20), true)) // blocks on the windows; fails at Close
		}()
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	first := held[0]
	mu.Unlock()
	n := 0
	done := make(chan error, 1)
	go func() {
		for {
			b, err := first.Recv()
			if err != nil {
				done <- err
				return
			}
			n += b.Len()
			b.Free()
		}
	}()
	select {
	case err := <-done:
		if err != io.EOF || n != 1<<20 {
			t.Fatalf("reading stream got %d bytes, then %v", n, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a reading stream is blocked behind streams that do not read")
	}
	p.close(t)
	wg.Wait()
	for _, s := range streams {
		s.Release()
	}
	mu.Lock()
	for _, s := range held {
		s.Release()
	}
	mu.Unlock()
	checkLeaks(t, p.pool, g)
}
