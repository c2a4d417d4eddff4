package h2conn

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// rawPeer is a client speaking raw frames to a server engine over net.Pipe.
type rawPeer struct {
	nc   net.Conn
	fw   *h2frame.Writer
	fr   *h2frame.Reader
	srv  *Conn
	errc chan error
	pool *bufpool.Pool
	// drained is closed once the drain goroutine, which then owns fr,
	// stopped; nil when not draining.
	drained chan struct{}
}

// drain reads and drops everything the server writes, on a goroutine.
func (p *rawPeer) drain() {
	p.drained = make(chan struct{})
	go func() {
		defer close(p.drained)
		for {
			f, err := p.fr.ReadFrame()
			if err != nil {
				return
			}
			if df, ok := f.(*h2frame.DataFrame); ok && df.Data != nil {
				df.Data.Free()
			}
		}
	}()
}

func newRawPeer(t *testing.T, cfg Config, h Handler) *rawPeer {
	t.Helper()
	pool := bufpool.New(nil)
	cfg.Pool = pool
	cn, sn := net.Pipe()
	p := &rawPeer{nc: cn, pool: pool, errc: make(chan error, 1)}
	p.fw = h2frame.NewWriter(cn, h2frame.WriterConfig{Pool: pool})
	p.fr = h2frame.NewReader(cn, h2frame.ReaderConfig{Pool: pool, NoPooledReads: true})
	if h == nil {
		h = HandlerFunc(func(s *Stream) {})
	}
	p.srv = NewServerConn(sn, cfg, h)
	go func() { p.errc <- p.srv.Serve() }()
	return p
}

// greet sends the preface and empty SETTINGS and reads until the server's
// SETTINGS arrived (not its ACK of ours).
func (p *rawPeer) greet(t *testing.T) {
	t.Helper()
	p.fw.WritePreface()
	p.fw.WriteSettings()
	if err := p.fw.Flush(); err != nil {
		t.Fatal(err)
	}
	f := p.next(t)
	if _, ok := f.(*h2frame.SettingsFrame); !ok {
		t.Fatalf("first server frame %v", f.Header())
	}
}

func (p *rawPeer) next(t *testing.T) h2frame.Frame {
	t.Helper()
	p.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := p.fr.ReadFrame()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if df, ok := f.(*h2frame.DataFrame); ok && df.Data != nil {
		df.Data.Free()
		df.Data = nil
	}
	return f
}

// waitGoAway reads frames until a GOAWAY and returns it.
func (p *rawPeer) waitGoAway(t *testing.T) (h2frame.ErrCode, string) {
	t.Helper()
	for {
		if g, ok := p.next(t).(*h2frame.GoAwayFrame); ok {
			return g.Code, string(g.Debug)
		}
	}
}

func (p *rawPeer) close(t *testing.T) {
	p.nc.Close()
	<-p.srv.Done()
	<-p.errc
	if p.drained != nil {
		<-p.drained
	}
	p.fr.Close()
	p.fw.Close()
}

// A peer that floods PINGs and never reads gets ENHANCE_YOUR_CALM once the
// queued ACKs pass maxQueuedControlFrames, instead of growing the queue.
func TestPingFloodWithoutReading(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newRawPeer(t, Config{}, nil)
	p.greet(t)
	// Stop reading; flood.
	var werr error
	for i := 0; i < 3*maxQueuedControlFrames && werr == nil; i++ {
		p.fw.WritePing(false, [8]byte{byte(i)})
		if p.fw.Buffered() > 32<<10 {
			p.nc.SetWriteDeadline(time.Now().Add(3 * time.Second))
			werr = p.fw.Flush()
		}
	}
	select {
	case err := <-p.errc:
		var e *Error
		if !errors.As(err, &e) || e.Code != h2frame.ErrCodeEnhanceYourCalm {
			t.Fatalf("Serve = %v, want ENHANCE_YOUR_CALM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server kept queueing PING ACKs")
	}
	p.errc <- nil
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// Rapid reset: a peer opening and resetting streams in a loop is cut off.
func TestRapidResetFlood(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newRawPeer(t, Config{}, nil)
	p.greet(t)
	p.drain()
	id := uint32(1)
	for i := 0; i < 2*maxResetsPerWindow; i++ {
		p.fw.WriteHeaders(id, false, reqFields("/x"))
		p.fw.WriteRSTStream(id, h2frame.ErrCodeCancel)
		id += 2
		if p.fw.Buffered() > 16<<10 {
			if p.fw.Flush() != nil {
				break
			}
		}
	}
	p.fw.Flush()
	select {
	case err := <-p.errc:
		var e *Error
		if !errors.As(err, &e) || e.Code != h2frame.ErrCodeEnhanceYourCalm || e.Reason != "reset_flood" {
			t.Fatalf("Serve = %v, want ENHANCE_YOUR_CALM reset_flood", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rapid resets not limited")
	}
	p.errc <- nil
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// MaxConnectionIdle: a connection without streams gets a graceful GOAWAY
// and is closed.
func TestMaxConnectionIdle(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newRawPeer(t, Config{MaxConnectionIdle: 50 * time.Millisecond}, nil)
	p.greet(t)
	code, _ := p.waitGoAway(t)
	if code != h2frame.ErrCodeNo {
		t.Fatalf("GOAWAY code %v", code)
	}
	// The first GOAWAY comes with a PING; answer it so the second comes.
	for {
		f := p.next(t)
		if pf, ok := f.(*h2frame.PingFrame); ok && !pf.IsAck() {
			p.fw.WritePing(true, pf.Data)
			p.fw.Flush()
		}
		if ga, ok := f.(*h2frame.GoAwayFrame); ok {
			if ga.LastStreamID != 0 {
				t.Fatalf("final GOAWAY last stream %d", ga.LastStreamID)
			}
			break
		}
	}
	select {
	case <-p.srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("idle connection not closed")
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// MaxConnectionAge with a grace: graceful GOAWAY, then a hard close even
// though a stream is still open.
func TestMaxConnectionAgeGrace(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newRawPeer(t, Config{MaxConnectionAge: 30 * time.Millisecond, MaxConnectionAgeGrace: 50 * time.Millisecond}, nil)
	p.greet(t)
	p.fw.WriteHeaders(1, false, reqFields("/hang"))
	p.fw.Flush()
	code, _ := p.waitGoAway(t)
	if code != h2frame.ErrCodeNo {
		t.Fatalf("GOAWAY code %v", code)
	}
	p.drain()
	select {
	case <-p.srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection outlived MaxConnectionAge + grace")
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// Client keepalive: a server that never answers PINGs is detected.
func TestClientKeepaliveTimeout(t *testing.T) {
	g := runtime.NumGoroutine()
	pool := bufpool.New(nil)
	cn, sn := net.Pipe()
	// The fake server reads and discards everything, answering nothing.
	go io.Copy(io.Discard, sn)
	c, err := NewClientConn(cn, Config{Pool: pool, KeepaliveTime: 20 * time.Millisecond,
		KeepaliveTimeout: 30 * time.Millisecond, KeepalivePermitWithoutStream: true, SettingsTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("keepalive did not close a dead connection")
	}
	var e *Error
	if !errors.As(c.Err(), &e) || e.Reason != "keepalive_timeout" {
		t.Fatalf("Err = %v", c.Err())
	}
	sn.Close()
	checkLeaks(t, pool, g)
}

// Keepalive against a real server whose policy forbids such pings: GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings" after more than two strikes.
func TestKeepaliveTooManyPings(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newPair(t, Config{KeepaliveTime: 5 * time.Millisecond, KeepalivePermitWithoutStream: true},
		Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, false)
	select {
	case <-p.client.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server tolerated aggressive pings")
	}
	var e *Error
	if !errors.As(p.client.Err(), &e) || e.Code != h2frame.ErrCodeEnhanceYourCalm || !strings.Contains(e.Reason, "too_many_pings") {
		t.Fatalf("client Err = %v", p.client.Err())
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

func TestPingPolicy(t *testing.T) {
	c := &Conn{role: RoleServer, cfg: &Config{PingMinTime: time.Minute}}
	t0 := time.Unix(1000, 0)
	// The first ping is free; three more within MinTime: third strike ends it.
	if c.pingPolicyLocked(t0) != nil {
		t.Fatal("first ping struck")
	}
	c.numPeer = 1
	for i := 1; i <= 2; i++ {
		if err := c.pingPolicyLocked(t0.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatalf("strike %d ended the connection", i)
		}
	}
	if err := c.pingPolicyLocked(t0.Add(3 * time.Second)); err == nil || err.Code != h2frame.ErrCodeEnhanceYourCalm || err.Reason != "too_many_pings" {
		t.Fatalf("third strike: %v", err)
	}
	// Sending data forgives.
	c.pingStrikes, c.resetStrikes = 2, true
	if c.pingPolicyLocked(t0.Add(4*time.Second)) != nil || c.pingStrikes != 0 {
		t.Fatal("strikes not reset by sent data")
	}
	// Polite pings never strike.
	for i := 1; i <= 5; i++ {
		if c.pingPolicyLocked(t0.Add(4*time.Second+time.Duration(i)*time.Minute)) != nil {
			t.Fatal("polite ping struck")
		}
	}
	// Without streams and not permitted: two hours apply.
	c.numPeer = 0
	base := t0.Add(time.Hour)
	c.lastPingAt = base.UnixNano()
	for i := 1; i <= 3; i++ {
		c.pingPolicyLocked(base.Add(time.Duration(i) * 10 * time.Minute))
	}
	if c.pingStrikes != 3 {
		t.Fatalf("strikes without streams = %d, want 3", c.pingStrikes)
	}
}

// Settings from the peer: INITIAL_WINDOW_SIZE applies the delta to open
// streams' send windows (§6.9.2) and overflow is FLOW_CONTROL_ERROR.
func TestApplySettings(t *testing.T) {
	cn, sn := net.Pipe()
	defer cn.Close()
	defer sn.Close()
	c := newConn(sn, Config{}, RoleServer, nil)
	defer c.fw.Close()
	defer c.fr.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.newStreamLocked(1, false)
	s.state = stateOpen
	s.out.take(1000) // 64535 left
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 100}); err != nil {
		t.Fatal(err)
	}
	if s.out.n != 100-1000 {
		t.Fatalf("window after decrease %d, want -900", s.out.n)
	}
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if s.out.n != 1<<20-1000 {
		t.Fatalf("window after increase %d", s.out.n)
	}
	s.out.n = h2frame.MaxWindowSize - 10
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 1<<20 + 11}); err == nil || err.Code != h2frame.ErrCodeFlowControl {
		t.Fatalf("overflow: %v", err)
	}
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingMaxConcurrentStreams, Val: 7}); err != nil || c.peer.maxConcurrentStreams != 7 {
		t.Fatal("MAX_CONCURRENT_STREAMS not recorded")
	}
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingMaxFrameSize, Val: 1 << 20}); err != nil || c.peer.maxFrameSize != 1<<20 {
		t.Fatal("MAX_FRAME_SIZE not recorded")
	}
	if err := c.applySettingLocked(h2frame.Setting{ID: 0x99, Val: 1}); err != nil {
		t.Fatal("unknown setting refused")
	}
	c.role = RoleClient
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingEnablePush, Val: 1}); err == nil || err.Code != h2frame.ErrCodeProtocol {
		t.Fatal("server enabling push accepted by a client")
	}
}

// waitGoroutines waits until at most n goroutines run.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, want at most %d\n%s", runtime.NumGoroutine(), n, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newAsyncPair is newPair over TCP with the server started by ServeAsync;
// ended is closed by its onEnd.
func newAsyncPair(t *testing.T, ccfg, scfg Config) (p *pair, ended chan struct{}) {
	t.Helper()
	pool := bufpool.New(nil)
	ccfg.Pool, scfg.Pool = pool, pool
	ccfg.PooledReads, scfg.PooledReads = true, true
	cn, sn := h2test.TCPPair(t)
	p = &pair{pool: pool}
	p.server = NewServerConn(sn, scfg, echoHandler(t, pool))
	ended = make(chan struct{})
	go p.server.ServeAsync(func() { close(ended) })
	var err error
	p.client, err = NewClientConn(cn, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, ended
}

// A server response completed before the request: RST_STREAM(NO_ERROR),
// and the client still reads the whole response.
func TestServerRespondsBeforeRequestEnds(t *testing.T) {
	g := runtime.NumGoroutine()
	h := func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) {
			go func() {
				s.WriteHeaders(respFields, false)
				s.WriteData(pool.Copy([]byte("early")), false)
				s.WriteTrailers(trailerFields)
			}()
		})
	}
	p := newPair(t, Config{}, Config{}, h, false)
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), false)
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
	s, err := p.client.NewStream(context.Background(), reqFields("/x"), false)
	if err != nil {
		t.Fatal(err)
	}
	ss := <-got
	ss.ExpectMessage(1 << 20)
	sent := make(chan error, 1)
	go func() { sent <- s.WriteData(p.pool.Get(1<<20), true) }()
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
		s, err := p.client.NewStream(context.Background(), reqFields("/sink"), false)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.WriteData(p.pool.Get(1<<20), true) // blocks on the windows; fails at Close
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

// Server keepalive: the server pings an idle connection and closes it when
// the ACK does not come; a peer that answers keeps it.
func TestServerKeepalive(t *testing.T) {
	g := runtime.NumGoroutine()
	cfg := Config{ServerKeepaliveTime: 20 * time.Millisecond, ServerKeepaliveTimeout: 30 * time.Millisecond}
	p := newRawPeer(t, cfg, nil)
	p.greet(t)
	// Answer three pings: the connection stays up.
	for acked := 0; acked < 3; {
		f := p.next(t)
		if pf, ok := f.(*h2frame.PingFrame); ok && !pf.IsAck() {
			p.fw.WritePing(true, pf.Data)
			p.fw.Flush()
			acked++
		}
	}
	select {
	case <-p.srv.Done():
		t.Fatal("server closed a connection whose peer answers pings")
	default:
	}
	// Stop answering: closed within a ping interval plus the timeout.
	p.drain()
	select {
	case <-p.srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server kept a silent connection")
	}
	var e *Error
	if err := p.srv.Err(); !errors.As(err, &e) || e.Reason != "keepalive_timeout" {
		t.Fatalf("Err = %v", err)
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// A flood of empty DATA frames (no payload, no END_STREAM) is cut off.
func TestEmptyDataFlood(t *testing.T) {
	g := runtime.NumGoroutine()
	p := newRawPeer(t, Config{}, nil)
	p.greet(t)
	p.drain()
	p.fw.WriteHeaders(1, false, reqFields("/x"))
	for i := 0; i <= maxEmptyDataFrames; i++ {
		p.fw.WriteData(1, false, nil)
		if p.fw.Buffered() > 16<<10 {
			if p.fw.Flush() != nil {
				break
			}
		}
	}
	p.fw.Flush()
	select {
	case err := <-p.errc:
		var e *Error
		if !errors.As(err, &e) || e.Code != h2frame.ErrCodeEnhanceYourCalm || e.Reason != "empty_data_flood" {
			t.Fatalf("Serve = %v, want ENHANCE_YOUR_CALM empty_data_flood", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("empty DATA flood not limited")
	}
	p.errc <- nil
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// Conns of one configuration share its normalized copy, and a window a
// connection grows stays its own.
func TestConfigInterned(t *testing.T) {
	pool := bufpool.New(nil)
	a1, a2 := net.Pipe()
	defer a1.Close()
	defer a2.Close()
	cfg := Config{Pool: pool, InitialConnWindow: 1 << 16}
	c1 := newConn(a1, cfg, RoleServer, nil)
	c2 := newConn(a2, cfg, RoleServer, nil)
	if c1.cfg != c2.cfg {
		t.Fatal("two conns of one configuration hold separate copies")
	}
	// A full table still takes new configurations (the bound evicts), so
	// sharing does not stop after the first maxInternedConfigs pools.
	for i := 0; i < 2*maxInternedConfigs; i++ {
		internConfig(Config{Pool: bufpool.New(nil)})
	}
	if n := len(configs.m); n > maxInternedConfigs {
		t.Fatalf("%d interned configurations; bound %d", n, maxInternedConfigs)
	}
	late := Config{Pool: bufpool.New(nil)}
	if internConfig(late) != internConfig(late) {
		t.Fatal("a configuration created after the table filled is not shared")
	}
	c1.mu.Lock()
	c1.growWindowsLocked(4 << 20)
	c1.mu.Unlock()
	if c1.connWindow != 8<<20 || c2.connWindow != 1<<16 || c1.cfg.InitialConnWindow != 1<<16 {
		t.Fatalf("conn windows %d and %d, shared config %d", c1.connWindow, c2.connWindow, c1.cfg.InitialConnWindow)
	}
}

// A conn of either role makes its GoingAway and Done channels on demand;
// one taken before the end and one taken after are both closed, and
// IsGoingAway and Ended agree with them.
func TestGoingAwayLazy(t *testing.T) {
	for _, role := range []Role{RoleServer, RoleClient} {
		a, b := net.Pipe()
		go io.Copy(io.Discard, b) // takes the GOAWAY of Close
		c := newConn(a, Config{Pool: bufpool.New(nil)}, role, nil)
		if c.notify != nil {
			t.Fatalf("%v conn made its channels up front", role)
		}
		before := c.GoingAway()
		select {
		case <-before:
			t.Fatalf("%v: GoingAway closed on a live conn", role)
		default:
		}
		if c.IsGoingAway() || c.Ended() {
			t.Fatalf("%v: IsGoingAway %v, Ended %v on a live conn", role, c.IsGoingAway(), c.Ended())
		}
		c.Close()
		for _, ch := range []<-chan struct{}{before, c.GoingAway()} {
			select {
			case <-ch:
			default:
				t.Fatalf("%v: GoingAway open after Close", role)
			}
		}
		if !c.IsGoingAway() {
			t.Fatalf("%v: IsGoingAway false after Close", role)
		}
		b.Close()
	}
}

// Conn stays within the 512-byte size class (an object over 512 bytes
// would also carry an 8-byte malloc header).
func TestConnSize(t *testing.T) {
	if n := unsafe.Sizeof(Conn{}); n > 512 {
		t.Fatalf("Conn is %d bytes, want at most 512", n)
	}
}

// endHandler records the conn its ConnEnded was called with.
type endHandler struct {
	HandlerFunc
	ended chan *Conn
}

func (h endHandler) ConnEnded(c *Conn) { h.ended <- c }

// ServeAsync(nil) with an EndHandler calls its ConnEnded once the
// connection ended: here one closed before it was served, and one whose
// peer goes away.
func TestServeAsyncEndHandler(t *testing.T) {
	for _, closeFirst := range []bool{true, false} {
		a, b := net.Pipe()
		go io.Copy(io.Discard, b)
		h := endHandler{HandlerFunc: func(*Stream) {}, ended: make(chan *Conn, 2)}
		c := newConn(a, Config{Pool: bufpool.New(nil)}, RoleServer, h)
		if closeFirst {
			c.Close()
		} else {
			b.Close()
		}
		c.ServeAsync(nil)
		select {
		case got := <-h.ended:
			if got != c {
				t.Fatalf("closeFirst %v: ConnEnded with another conn", closeFirst)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("closeFirst %v: ConnEnded not called", closeFirst)
		}
		if len(h.ended) != 0 {
			t.Fatalf("closeFirst %v: ConnEnded called twice", closeFirst)
		}
		b.Close()
	}
}

// The recently closed ring answers for the ids put in it, and only for
// them among nearby ids, also once it wrapped.
func TestRecentClosed(t *testing.T) {
	c := &Conn{}
	for _, id := range []uint32{1, 3, 5} {
		if c.wasClosedLocked(id) {
			t.Fatalf("empty ring: %d reported closed", id)
		}
	}
	for id := uint32(1); id < 2*recentClosedIDs+40; id += 2 {
		c.rememberClosedLocked(id)
	}
	last := uint32(2*recentClosedIDs + 39)
	for id := uint32(1); id <= last+200; id += 2 {
		want := id <= last && id > last-2*recentClosedIDs
		if got := c.wasClosedLocked(id); got != want {
			t.Fatalf("id %d: closed %v, want %v", id, got, want)
		}
	}
}

// The BDP estimator appears once a stream window's worth of DATA arrived,
// in the state it would have had counting from the first byte; a
// connection of small calls, or one with BDP off, never makes it, and an
// ACK of a BDP PING nobody sent finds nothing to update.
func TestBDPLazy(t *testing.T) {
	c := &Conn{cfg: &Config{InitialStreamWindow: 1000}}
	if b := c.bdpLocked(400); b != nil {
		t.Fatal("estimator made before a window's worth")
	}
	c.bdp.onAck(time.Now()) // an unsolicited ACK: no panic, nothing to do
	b := c.bdpLocked(600)
	if b == nil || c.bdp != b {
		t.Fatal("no estimator after a window's worth")
	}
	now := time.Now()
	if ping, _ := b.onData(600, func() time.Time { return now }); !ping {
		t.Fatal("the first window's worth did not start a BDP sample")
	}
	if c.bdpLocked(1) != b {
		t.Fatal("a second estimator was made")
	}
	off := &Conn{cfg: &Config{InitialStreamWindow: 1000, DisableBDP: true}}
	if off.bdpLocked(1<<20) != nil || off.bdp != nil {
		t.Fatal("estimator made with BDP off")
	}
}

// The idle wait starts short, doubles per creditsPerDoubling reads and
// stops at idleReadWait.
func TestIdleWaitBounds(t *testing.T) {
	c := &Conn{}
	if w := c.idleWait(); w != minIdleReadWait {
		t.Fatalf("fresh connection waits %v, want %v", w, minIdleReadWait)
	}
	c.idleCredit = creditsPerDoubling - 1
	if w := c.idleWait(); w != minIdleReadWait {
		t.Fatalf("after %d reads: %v, want %v", c.idleCredit, w, minIdleReadWait)
	}
	c.idleCredit = 3 * creditsPerDoubling
	if w := c.idleWait(); w != 8*minIdleReadWait {
		t.Fatalf("after %d reads: %v, want %v", c.idleCredit, w, 8*minIdleReadWait)
	}
	c.idleCredit = 255
	if w := c.idleWait(); w != idleReadWait {
		t.Fatalf("idle wait at credit 255: %v, want %v", w, idleReadWait)
	}
}

// settledGoroutines returns the number of goroutines once it has not
// changed for 50 ms (waiting at most 3 s): the baseline of a test that
// infers from the count that readers went idle, so that goroutines of
// earlier tests still ending (a closing connection's reader, a short-lived
// writer) do not leave later and pass for this test's readers.
func settledGoroutines() int {
	deadline := time.Now().Add(3 * time.Second)
	n, since := runtime.NumGoroutine(), time.Now()
	for time.Since(since) < 50*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}
