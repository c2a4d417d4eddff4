package h2conn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// The stream write API, called only through these functions, and the send
// slot, read only through slotIdle, so that a change of either is a change
// here only. rHoldFlush marks the stream's next item as held (SendItem.Hold)
// for the write that follows it.

// randomHolds holds the streams whose next item is held.
var randomHolds sync.Map

func rHoldFlush(s *Stream) { randomHolds.Store(s, true) }

// rSend sends it, held when rHoldFlush asked for it.
func rSend(s *Stream, it SendItem) error {
	if _, held := randomHolds.LoadAndDelete(s); held {
		it.Hold = true
	}
	return s.Send(it)
}

func rWriteHeaders(s *Stream, fields []hpack.HeaderField, end bool) error {
	return rSend(s, HeadersItem(fields, end))
}

func rWriteHeadersData(s *Stream, fields []hpack.HeaderField, b *bufpool.Buffer, end bool) error {
	return rSend(s, HeadersDataItem(fields, b, end))
}

func rWriteData(s *Stream, b *bufpool.Buffer, end bool) error { return rSend(s, DataItem(b, end)) }

func rWriteTrailers(s *Stream, fields []hpack.HeaderField) error {
	return rSend(s, TrailersItem(fields))
}

func rCloseSend(s *Stream) error { return rSend(s, DataItem(nil, true)) }

func rWriteResponse(s *Stream, fields []hpack.HeaderField, b *bufpool.Buffer, trailers []hpack.HeaderField) error {
	return rSend(s, ResponseItem(fields, b, trailers))
}

func rWriteResponseAsync(s *Stream, fields []hpack.HeaderField, b *bufpool.Buffer, trailers []hpack.HeaderField) error {
	return rSend(s, handedOver(ResponseItem(fields, b, trailers)))
}

// slotIdle reports whether s's send slot holds no item. Called with
// s.conn.mu held.
func slotIdle(s *Stream) bool { return !s.slot.pending() && s.slot.item.Data == nil }

// TestRandomConcurrency drives one client engine and one server engine with
// random work on many streams at once: opens, messages of 0 B to 300 KiB
// (so that windows run out), half-closes, receives with Recv or RecvInto,
// cancels from a third goroutine while the stream's sender and receiver
// are busy, releases, server resets, and server answers both streaming and
// unary-shaped through every write entry point. After every step it checks
// the engines' invariants (checkConnInvariants); each stream checks that
// what arrived is, in order, a prefix of what was sent, and all of it when
// neither side abandoned the stream. Between epochs of work it lets both
// connections go quiet and checks that the connection windows of the two
// ends agree. At the end every pooled buffer and goroutine is back.
//
// It runs about 5 s (1 s with -short); LEANGRPC_RANDOM=<duration> runs it
// that long. The seed is logged on failure; LEANGRPC_RANDOM_SEED=<n>
// replays the same plans (the goroutines' interleaving still varies).
func TestRandomConcurrency(t *testing.T) {
	dur := 5 * time.Second
	if testing.Short() {
		dur = time.Second
	}
	if v, err := time.ParseDuration(os.Getenv("LEANGRPC_RANDOM")); err == nil && v > 0 {
		dur = v
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LEANGRPC_RANDOM_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("LEANGRPC_RANDOM_SEED: %v", err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with LEANGRPC_RANDOM_SEED=%d", seed)
		}
	})
	h2test.CheckGoroutines(t)
	newRandomRun(t, seed).run(dur)
}

// Directions of a stream's bytes, for their place in the pattern.
const (
	dirRequest = iota
	dirResponse
)

// patternLen is the length of the random bytes every message is cut from.
// Not a power of two, and above the largest message, so that a chunk
// delivered twice or out of place does not match by accident.
const patternLen = 1<<20 + 7

type clientKind uint8

const (
	clientNoBody    clientKind = iota // HEADERS with END_STREAM
	clientUnary                       // StreamOptions.Unary and one message
	clientStreaming                   // messages, then CloseSend, a last message with END_STREAM, or trailers
)

type serverKind uint8

const (
	serverStreaming serverKind = iota // headers, messages while the request arrives, the end once it ended
	serverUnary                       // the whole request, then headers, a message and trailers
	serverEarly                       // the whole response without waiting for the request (RST_STREAM NO_ERROR)
	serverReset                       // part of a response, then Reset with resetCode from a third goroutine
)

type cancelMode uint8

const (
	cancelNone        cancelMode = iota
	cancelReset                  // Reset(CANCEL) from a third goroutine
	cancelCanceled               // Canceled closed, then Reset, as a caller without WatchCanceled does
	cancelWatch                  // Canceled closed, WatchCanceled: the waiting call resets
	cancelGiveUp                 // the receiver stops early and may Reset; Release resets the rest
	cancelOpenTimeout            // NewStream's context expires, possibly while it waits for a slot
)

// exchange is one client stream and its server side: what each side plans,
// so that the other knows what to expect, and the bytes each side handed
// to writes, counted before the write so that a receiver that saw the end
// sees the full count.
type exchange struct {
	key        uint64
	client     clientKind
	server     serverKind
	cancel     cancelMode
	resetCode  h2frame.ErrCode
	reqIssued  atomic.Int64
	respIssued atomic.Int64
	// abandoned is set before the client resets, cancels or releases the
	// stream before its end: from then on either side may be cut short.
	abandoned atomic.Bool
	// serverResetDone is set before the server's Reset.
	serverResetDone atomic.Bool
}

// trackedStream is a stream not yet released, which the checker may look
// at (c.mu held). inWrite is set while a goroutine of the test is inside
// one of the stream's write calls.
type trackedStream struct {
	s       *Stream
	conn    *Conn
	inWrite atomic.Bool
}

type randomRun struct {
	t              *testing.T
	seed           uint64
	pool           *bufpool.Pool
	client, server *Conn
	serveErr       chan error
	pattern        []byte

	trackMu sync.Mutex
	tracked map[*trackedStream]struct{} // guarded by trackMu

	exMu      sync.Mutex
	exchanges map[uint64]*exchange // guarded by exMu; emptied between epochs

	serverActive atomic.Int64 // server handlers not yet returned
	failures     atomic.Int32

	ops, streams, normal, abandoned, serverResets, early, timeouts, bytes atomic.Int64
	peakStreams                                                           atomic.Int64
}

func newRandomRun(t *testing.T, seed uint64) *randomRun {
	r := &randomRun{
		t:         t,
		seed:      seed,
		pool:      bufpool.New(nil),
		serveErr:  make(chan error, 1),
		pattern:   make([]byte, patternLen),
		tracked:   map[*trackedStream]struct{}{},
		exchanges: map[uint64]*exchange{},
	}
	h2test.CheckPool(t, r.pool) // before the connections take buffers
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := range r.pattern {
		r.pattern[i] = byte(rng.Uint32())
	}
	// Windows from small (many waits for WINDOW_UPDATE) to the defaults.
	streamWin := []uint32{16 << 10, 64 << 10, 256 << 10, 0}[rng.IntN(4)]
	connWin := []uint32{64 << 10, 256 << 10, 1 << 20, 0}[rng.IntN(4)]
	frame := []uint32{0, 0, 64 << 10}[rng.IntN(3)]
	bdp := rng.IntN(2) == 0
	ccfg := Config{Pool: r.pool, InitialStreamWindow: streamWin, InitialConnWindow: connWin, MaxFrameSize: frame, DisableBDP: !bdp}
	scfg := ccfg
	scfg.MaxConcurrentStreams = []uint32{8, 32, 100}[rng.IntN(3)]
	tcp := rng.IntN(4) != 0
	var cn, sn net.Conn
	if tcp {
		cn, sn = h2test.TCPPair(t)
		ccfg.PooledReads, scfg.PooledReads = true, true
	} else {
		cn, sn = net.Pipe()
	}
	t.Logf("seed %d: tcp %v, stream window %d, conn window %d, max frame %d, BDP %v, server max streams %d",
		seed, tcp, streamWin, connWin, frame, bdp, scfg.MaxConcurrentStreams)
	r.server = NewServerConn(sn, scfg, HandlerFunc(func(s *Stream) {
		r.serverActive.Add(1) // before the client can see an answer: see barrier
		go r.serve(s)
	}))
	go func() { r.serveErr <- r.server.Serve() }()
	var err error
	if r.client, err = NewClientConn(cn, ccfg); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *randomRun) failf(format string, args ...any) {
	if r.failures.Add(1) > 20 {
		return // the first ones say it; the rest would bury them
	}
	r.t.Errorf("seed %d: "+format, append([]any{r.seed}, args...)...)
}

// rng returns the random source of one goroutine's part in stream key.
func (r *randomRun) rng(key, part uint64) *rand.Rand {
	return rand.New(rand.NewPCG(r.seed^(key*0x9e3779b97f4a7c15), part))
}

// step counts one operation and checks the invariants after it.
func (r *randomRun) step() {
	r.ops.Add(1)
	r.check()
}

// run opens streams in epochs until dur has passed; between epochs both
// connections go quiet and are checked, then closed at the end.
func (r *randomRun) run(dur time.Duration) {
	rng := rand.New(rand.NewPCG(r.seed, 1))
	r.sync()
	r.waitSettled()
	start := time.Now()
	var key uint64
	epochs := 0
	for time.Since(start) < dur && r.failures.Load() == 0 {
		epochs++
		// A limit of streams in flight, sometimes over the server's
		// MAX_CONCURRENT_STREAMS so that NewStream waits for a slot.
		sem := make(chan struct{}, 2+rng.IntN(40))
		end := time.Now().Add(time.Duration(100+rng.IntN(900)) * time.Millisecond)
		var wg sync.WaitGroup
		for time.Now().Before(end) && r.failures.Load() == 0 {
			select {
			case sem <- struct{}{}:
			case <-time.After(20 * time.Second):
				r.hang("no stream finished for 20 s")
			}
			key++
			k := key
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				r.clientStream(k)
			}()
		}
		if !r.waitGroup(&wg, "client streams") {
			break
		}
		if !r.barrier() {
			break
		}
	}
	elapsed := time.Since(start)
	r.close()
	r.t.Logf("seed %d: %v, %d epochs, %d ops (%.0f/s), %d streams (%.0f/s, up to %d open at once on the server): "+
		"%d ended normally, %d abandoned by the client, %d reset by the server, %d answered before the request ended, %d NewStream timeouts; %d MiB of messages",
		r.seed, elapsed.Round(time.Millisecond), epochs, r.ops.Load(), float64(r.ops.Load())/elapsed.Seconds(),
		r.streams.Load(), float64(r.streams.Load())/elapsed.Seconds(), r.peakStreams.Load(),
		r.normal.Load(), r.abandoned.Load(), r.serverResets.Load(), r.early.Load(), r.timeouts.Load(), r.bytes.Load()>>20)
}

// waitGroup waits for wg, failing the test with every stack after 20 s.
func (r *randomRun) waitGroup(wg *sync.WaitGroup, what string) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(20 * time.Second):
		r.hang(what + " did not finish in 20 s")
		<-done // closing the connections ends every wait
		return false
	}
}

// hang reports a test stuck in the engine, with every goroutine's stack,
// and closes both connections so that the stuck calls return.
func (r *randomRun) hang(what string) {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	r.failf("%s\n%s", what, buf)
	r.client.Close()
	r.server.Close()
}

// waitUntil calls cond every millisecond until it returns "" or 5 s pass; it
// reports the last answer otherwise.
func waitUntil(cond func() string) string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		msg := cond()
		if msg == "" || time.Now().After(deadline) {
			return msg
		}
		time.Sleep(time.Millisecond)
	}
}

// barrier lets both connections go quiet after an epoch and checks what
// holds only then: every stream gone, and the connection windows of the
// two ends in agreement.
func (r *randomRun) barrier() bool {
	// The server called HandleStream for every stream opened before this
	// request before it answers it, so serverActive counts them all.
	r.sync()
	if msg := waitUntil(func() string {
		if n := r.serverActive.Load(); n != 0 {
			return fmt.Sprintf("%d server handlers still running", n)
		}
		return ""
	}); msg != "" {
		r.hang(msg)
		return false
	}
	if msg := waitUntil(func() string { return quiet(r.client) + quiet(r.server) }); msg != "" {
		r.failf("connections not quiet after an epoch: %s", msg)
		return false
	}
	// Frames sent before this exchange have arrived once it is answered:
	// no DATA is in flight, so the readers leave the receive windows
	// (owned by the run loop, written without mu) alone.
	r.sync()
	if msg := waitUntil(func() string { return windowsAgree(r.client, r.server) }); msg != "" {
		r.failf("after an epoch: %s", msg)
		return false
	}
	r.exMu.Lock()
	clear(r.exchanges)
	r.exMu.Unlock()
	return r.failures.Load() == 0
}

// quiet reports what c still has in progress: streams, items to write, a
// writer.
func quiet(c *Conn) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.streams) != 0 || c.ready.n != 0 || c.writing || len(c.ctrl) != 0 {
		return fmt.Sprintf("%v: %d streams, %d ready, writing %v, %d control frames; ", c.role, len(c.streams), c.ready.n, c.writing, len(c.ctrl))
	}
	return ""
}

// windowsAgree checks, on quiet connections, that each side's connection
// send window is what the other side's receive window allows, and that a
// receive window plus what it owes the peer is the announced window.
func windowsAgree(client, server *Conn) string {
	client.mu.Lock()
	defer client.mu.Unlock()
	server.mu.Lock()
	defer server.mu.Unlock()
	for _, c := range []*Conn{client, server} {
		if c.inflow.avail < 0 || c.inflow.unsent < 0 || c.inflow.avail+c.inflow.unsent != int64(c.connWindow) {
			return fmt.Sprintf("%v connection receive window %+v, window %d", c.role, c.inflow, c.connWindow)
		}
	}
	if client.outflow.n != server.inflow.avail || server.outflow.n != client.inflow.avail {
		return fmt.Sprintf("connection windows disagree: client may send %d, server allows %d; server may send %d, client allows %d",
			client.outflow.n, server.inflow.avail, server.outflow.n, client.inflow.avail)
	}
	return ""
}

// waitSettled waits until both ends acknowledged each other's SETTINGS, so
// that windows no longer change under the checker (a stream opened before
// the ACK has the default window until then).
func (r *randomRun) waitSettled() {
	if msg := waitUntil(func() string {
		for _, c := range []*Conn{r.client, r.server} {
			c.mu.Lock()
			acked := c.settingsAcked
			c.mu.Unlock()
			if !acked {
				return fmt.Sprintf("%v: SETTINGS not acknowledged", c.role)
			}
		}
		return ""
	}); msg != "" {
		r.t.Fatal(msg)
	}
}

// sync makes one request the server answers at once.
func (r *randomRun) sync() {
	s, err := r.client.NewStream(context.Background(), reqFields("/sync"), StreamOptions{EndStream: true})
	if err != nil {
		r.failf("sync: NewStream: %v", err)
		return
	}
	if _, end, err := s.RecvHeaders(); err != nil || !end {
		r.failf("sync: RecvHeaders: end %v, %v", end, err)
	}
	s.Release()
}

func (r *randomRun) close() {
	r.client.Close()
	r.server.Close()
	<-r.client.Done()
	<-r.server.Done()
	<-r.serveErr
}

func (r *randomRun) track(s *Stream) *trackedStream {
	ts := &trackedStream{s: s, conn: s.conn}
	r.trackMu.Lock()
	r.tracked[ts] = struct{}{}
	r.trackMu.Unlock()
	return ts
}

// release stops tracking ts before releasing its stream: a released
// stream's object may open another stream at once.
func (r *randomRun) release(ts *trackedStream) {
	r.trackMu.Lock()
	delete(r.tracked, ts)
	r.trackMu.Unlock()
	ts.s.Release()
	r.step()
}

// write runs one write call on ts, marked as in progress for the checker.
func (r *randomRun) write(ts *trackedStream, f func(s *Stream) error) error {
	ts.inWrite.Store(true)
	err := f(ts.s)
	ts.inWrite.Store(false)
	r.step()
	return err
}

// check checks both connections' invariants.
func (r *randomRun) check() {
	if r.failures.Load() > 0 {
		return
	}
	r.trackMu.Lock()
	defer r.trackMu.Unlock()
	for _, c := range []*Conn{r.client, r.server} {
		if err := checkConnInvariants(c, r.tracked); err != nil {
			r.failf("%v", err)
		}
	}
}

// checkConnInvariants checks what holds at every moment on c, under c.mu:
// the connection is up, its stream counts match its streams, no closed
// stream stays registered, send windows and stream receive windows are
// never negative nor above what was announced, and a closed stream's send
// slot is empty once no write call on it is in progress (tracked: the
// streams the test has not released; it must hold their lock).
//
// The connection receive window is not checked here: it is owned by the
// reader, which charges it without mu (onData), so it is checked between
// epochs when no DATA is in flight (windowsAgree).
func checkConnInvariants(c *Conn, tracked map[*trackedStream]struct{}) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return fmt.Errorf("%v connection ended: %v", c.role, c.closeErr)
	}
	if c.outflow.n < 0 || c.outflow.n > h2frame.MaxWindowSize {
		return fmt.Errorf("%v connection send window %d", c.role, c.outflow.n)
	}
	if n := int(c.numLocal + c.numPeer); n != len(c.streams) {
		return fmt.Errorf("%v: %d+%d streams counted, %d registered", c.role, c.numLocal, c.numPeer, len(c.streams))
	}
	for id, s := range c.streams {
		switch {
		case s.id != id || s.conn != c:
			return fmt.Errorf("%v: stream %d registered as %d", c.role, s.id, id)
		case s.state == stateClosed:
			return fmt.Errorf("%v: closed stream %d still registered", c.role, id)
		case s.out.n < 0 || s.out.n > h2frame.MaxWindowSize:
			return fmt.Errorf("%v: stream %d send window %d", c.role, id, s.out.n)
		}
		s.rmu.Lock()
		in := s.in
		s.rmu.Unlock()
		if in.avail < 0 || in.unsent < 0 || in.avail+in.unsent > int64(c.streamWindow.Load()) {
			return fmt.Errorf("%v: stream %d receive window %+v, window %d", c.role, id, in, c.streamWindow.Load())
		}
	}
	for ts := range tracked {
		if ts.conn == c && ts.s.state == stateClosed && !ts.inWrite.Load() && !slotIdle(ts.s) {
			return fmt.Errorf("%v: closed stream %d keeps an item in its send slot", c.role, ts.s.id)
		}
	}
	return nil
}

// Message sizes from empty to 300 KiB, most of them small.
func randSize(rng *rand.Rand) int {
	switch p := rng.IntN(10); {
	case p < 4:
		return rng.IntN(65)
	case p < 7:
		return 65 + rng.IntN(4<<10)
	case p < 9:
		return 4<<10 + rng.IntN(60<<10)
	default:
		return 64<<10 + rng.IntN(236<<10)
	}
}

// patternStart is where direction dir of stream key begins in the pattern.
func patternStart(key uint64, dir int) int64 {
	return int64((key*2654435761 + uint64(dir)*40503) % patternLen)
}

// message returns an owned buffer with the n bytes at offset off of the
// direction starting at start; nil for some empty messages.
func (r *randomRun) message(rng *rand.Rand, start, off int64, n int) *bufpool.Buffer {
	r.bytes.Add(int64(n))
	if n == 0 && rng.IntN(2) == 0 {
		return nil
	}
	b := r.pool.Get(n)
	for p := b.Bytes(); len(p) > 0; {
		i := (start + off) % patternLen
		k := copy(p, r.pattern[i:])
		p, off = p[k:], off+int64(k)
	}
	return b
}

// matches reports whether p is the bytes at offset off of the direction
// starting at start.
func (r *randomRun) matches(start, off int64, p []byte) bool {
	for len(p) > 0 {
		i := (start + off) % patternLen
		k := min(len(p), patternLen-int(i))
		if !bytes.Equal(p[:k], r.pattern[i:i+int64(k)]) {
			return false
		}
		p, off = p[k:], off+int64(k)
	}
	return true
}

// receiver reads one direction of a stream with Recv, or with RecvInto
// into buffers of random sizes, and checks each piece against the pattern.
type receiver struct {
	r        *randomRun
	name     string
	start    int64
	got      int64
	into     bool
	dst      *bufpool.Buffer // RecvInto's buffer (owned), nil between buffers
	from, to int
	rng      *rand.Rand
}

// next receives the next piece: nil, io.EOF or the stream's error.
func (rc *receiver) next(s *Stream) error {
	if !rc.into {
		b, err := s.Recv()
		if err != nil {
			return err
		}
		rc.accept(b.Bytes())
		b.Free() // Recv returned an owned buffer
		return nil
	}
	if rc.dst == nil && rc.to == 0 {
		rc.from, rc.to = 0, 1+rc.rng.IntN(300<<10)
		if rc.rng.IntN(2) == 0 {
			rc.dst = rc.r.pool.Get(rc.to)
		} // else a registration without a buffer: RecvInto takes one
	}
	b, n, err := s.RecvInto(rc.dst, rc.from, rc.to)
	switch {
	case n > 0:
		if rc.dst == nil {
			if b == nil {
				rc.r.failf("%s: RecvInto without a buffer reported %d bytes and no buffer", rc.name, n)
				return err
			}
			rc.dst, rc.to = b, min(rc.to, b.Len())
		} else if b != nil {
			rc.r.failf("%s: RecvInto into a buffer returned another one too", rc.name)
			b.Free()
		}
		rc.accept(rc.dst.Bytes()[rc.from : rc.from+n])
		rc.from += n
		if rc.from >= rc.to {
			rc.dst.Free() // our reference
			rc.dst, rc.to = nil, 0
		}
	case b != nil:
		rc.accept(b.Bytes())
		b.Free() // a queued payload, owned
	}
	return err
}

func (rc *receiver) accept(p []byte) {
	if !rc.r.matches(rc.start, rc.got, p) {
		rc.r.failf("%s: %d bytes at offset %d are not the bytes sent there", rc.name, len(p), rc.got)
	}
	rc.got += int64(len(p))
}

// done frees what the receiver holds.
func (rc *receiver) done() {
	if rc.dst != nil {
		rc.dst.Free()
		rc.dst = nil
	}
}

// streamErr reports whether err is an engine *Error, the only error a
// stream used as the test uses it may return.
func streamErr(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// sentCount returns the x-sent field of fields, or -1.
func sentCount(fields []hpack.HeaderField) int64 {
	for _, f := range fields {
		if f.Name == "x-sent" {
			n, _ := strconv.ParseInt(f.Value, 10, 64)
			return n
		}
	}
	return -1
}

func (r *randomRun) exchange(key uint64) *exchange {
	r.exMu.Lock()
	defer r.exMu.Unlock()
	return r.exchanges[key]
}

// clientStream runs one exchange's client side: it opens the stream, sends
// on one goroutine, receives on this one, and may cancel from a third.
func (r *randomRun) clientStream(key uint64) {
	rng := r.rng(key, 0)
	x := &exchange{key: key}
	x.client = clientKind([]uint8{0, 1, 1, 2, 2, 2, 2}[rng.IntN(7)])
	x.server = serverKind([]uint8{0, 0, 0, 1, 1, 1, 2, 2, 3}[rng.IntN(9)])
	if p := rng.IntN(100); p < 20 {
		x.cancel = cancelMode(1 + rng.IntN(5))
	}
	x.resetCode = []h2frame.ErrCode{h2frame.ErrCodeCancel, h2frame.ErrCodeInternal, h2frame.ErrCodeRefusedStream}[rng.IntN(3)]
	r.exMu.Lock()
	r.exchanges[key] = x
	r.exMu.Unlock()

	fields := append(reqFields("/random"), hpack.HeaderField{Name: "x-key", Value: strconv.FormatUint(key, 10)})
	opts := StreamOptions{EndStream: x.client == clientNoBody, Unary: x.client == clientUnary}
	var canceled chan struct{}
	if x.cancel == cancelCanceled || x.cancel == cancelWatch {
		canceled = make(chan struct{})
		opts.Canceled, opts.WatchCanceled = canceled, x.cancel == cancelWatch
	}
	ctx := context.Background()
	if x.cancel == cancelOpenTimeout {
		c, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(2000))*time.Microsecond)
		defer cancel()
		ctx = c
	}
	s, err := r.client.NewStream(ctx, fields, opts)
	r.step()
	if err != nil {
		if x.cancel == cancelOpenTimeout && errors.Is(err, context.DeadlineExceeded) {
			r.timeouts.Add(1)
			return
		}
		r.failf("stream key %d: NewStream: %v", key, err)
		return
	}
	r.streams.Add(1)
	ts := r.track(s)
	finished := make(chan struct{})
	var wg sync.WaitGroup
	if x.cancel >= cancelReset && x.cancel <= cancelWatch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			delay := time.Duration(rng.IntN(3000)) * time.Microsecond
			select {
			case <-time.After(delay):
			case <-finished:
				return
			}
			x.abandoned.Store(true)
			if canceled != nil {
				close(canceled)
			}
			if x.cancel != cancelWatch {
				s.Reset(h2frame.ErrCodeCancel)
			}
			r.step()
		}()
	}
	sent := true
	if x.client != clientNoBody {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent = r.clientSend(ts, x)
		}()
	}
	received := r.clientRecv(ts, x)
	close(finished) // the receiver returned; the sender may still be at work
	wg.Wait()
	if x.abandoned.Load() {
		r.abandoned.Add(1)
	} else if received && sent {
		r.normal.Add(1)
	}
	r.release(ts)
}

// sendErr checks an error of a write on x's stream by side: any engine
// error once either side cut the stream short, none otherwise.
func (r *randomRun) sendErr(x *exchange, side, what string, err error, relaxed bool) {
	if relaxed || x.abandoned.Load() || x.serverResetDone.Load() {
		if !streamErr(err) {
			r.failf("stream key %d, %s %s: %v, want an engine error", x.key, side, what, err)
		}
		return
	}
	r.failf("stream key %d (client %d, server %d), %s %s failed on a stream nobody cut short: %v", x.key, x.client, x.server, side, what, err)
}

// clientSend writes the request body; it reports whether every write
// succeeded.
func (r *randomRun) clientSend(ts *trackedStream, x *exchange) bool {
	rng := r.rng(x.key, 1)
	start := patternStart(x.key, dirRequest)
	var off int64
	relaxed := x.server == serverEarly || x.server == serverReset
	send := func(what string, n int, last bool, holdNext bool) bool {
		b := r.message(rng, start, off, n)
		x.reqIssued.Add(int64(n))
		if holdNext {
			rHoldFlush(ts.s)
		}
		if err := r.write(ts, func(s *Stream) error { return rWriteData(s, b, last) }); err != nil {
			r.sendErr(x, "client", what, err, relaxed)
			return false
		}
		off += int64(n)
		return true
	}
	if x.client == clientUnary {
		// The held HEADERS wait for this message: it follows at once.
		return send("unary WriteData", randSize(rng), true, false)
	}
	msgs, ending := rng.IntN(6), rng.IntN(3)
	for i := range msgs {
		last := i == msgs-1 && ending == 0
		// HoldFlush only where the next write follows at once.
		hold := !last && rng.IntN(4) == 0
		if !send("WriteData", randSize(rng), last, hold) {
			return false
		}
		if last {
			return true
		}
		if !hold && rng.IntN(3) == 0 {
			time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
		}
	}
	var err error
	what := "CloseSend"
	// Trailers only where the server waits for the request's end: ones
	// that cross the server's RST_STREAM are ignored only while their id
	// is among the last recentClosedIDs closed (RFC 9113 §5.1 lets the
	// engine bound that period; TestWireTrailersAfterServerReset checks
	// it), and with dozens of streams closing meanwhile an older id is a
	// connection error. gRPC clients end requests with DATA, which is
	// never worse than a stream error.
	if ending == 1 && x.server != serverEarly && x.server != serverReset {
		what = "WriteTrailers"
		tr := []hpack.HeaderField{{Name: "x-sent", Value: strconv.FormatInt(off, 10)}}
		err = r.write(ts, func(s *Stream) error { return rWriteTrailers(s, tr) })
	} else {
		err = r.write(ts, rCloseSend)
	}
	if err != nil {
		r.sendErr(x, "client", what, err, relaxed)
		return false
	}
	return true
}

// clientRecv reads the response; it reports whether it read it to its end.
func (r *randomRun) clientRecv(ts *trackedStream, x *exchange) bool {
	rng := r.rng(x.key, 2)
	s := ts.s
	rc := &receiver{r: r, name: fmt.Sprintf("stream key %d client", x.key), start: patternStart(x.key, dirResponse), into: rng.IntN(3) == 0, rng: rng}
	defer rc.done()
	giveUp := int64(-1)
	if x.cancel == cancelGiveUp {
		giveUp = int64(rng.IntN(64 << 10))
	}
	h, end, err := s.RecvHeaders()
	r.step()
	if err != nil {
		r.clientRecvErr(x, "RecvHeaders", err)
		return false
	}
	if len(h) == 0 || h[0].Name != ":status" || h[0].Value != "200" {
		r.failf("stream key %d: response headers %v", x.key, h)
	}
	for {
		if giveUp >= 0 && rc.got >= giveUp {
			x.abandoned.Store(true)
			// Without a reset, a sender waiting for window from a
			// server that does not read would wait for ever, and
			// Release waits for the sender: only a stream without a
			// body is left for Release to reset.
			if x.client != clientNoBody || rng.IntN(2) == 0 {
				s.Reset(h2frame.ErrCodeCancel)
				r.step()
			}
			return false
		}
		err := rc.next(s)
		r.step()
		if err == io.EOF {
			break
		}
		if err != nil {
			r.clientRecvErr(x, "Recv", err)
			return false
		}
		if end {
			r.failf("stream key %d: Recv after a trailers-only response gave data", x.key)
		}
	}
	if x.server == serverReset {
		r.failf("stream key %d: the response ended normally; the server was to reset it", x.key)
	}
	if want := x.respIssued.Load(); rc.got != want {
		r.failf("stream key %d: response of %d bytes, the server sent %d", x.key, rc.got, want)
	}
	if n := sentCount(s.Trailers()); n >= 0 && n != rc.got {
		r.failf("stream key %d: trailers say %d bytes, %d arrived", x.key, n, rc.got)
	}
	return true
}

// clientRecvErr checks an error of the client's receiving side.
func (r *randomRun) clientRecvErr(x *exchange, what string, err error) {
	var e *Error
	switch {
	case !errors.As(err, &e):
		r.failf("stream key %d: client %s: %v, want an engine error", x.key, what, err)
	case x.abandoned.Load():
	case x.server == serverReset:
		if e.Code != x.resetCode || e.Initiator != InitiatorPeer {
			r.failf("stream key %d: client %s: %v, want the server's %v", x.key, what, err, x.resetCode)
		}
	default:
		r.failf("stream key %d (client %d, server %d): client %s failed on a stream nobody cut short: %v", x.key, x.client, x.server, what, err)
	}
}

var randomRespFields = []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}

func trailersFor(n int64) []hpack.HeaderField {
	return []hpack.HeaderField{{Name: "grpc-status", Value: "0"}, {Name: "x-sent", Value: strconv.FormatInt(n, 10)}}
}

// serve runs one exchange's server side: the request is received on one
// goroutine, the response sent on this one, and a reset may come from a
// third.
func (r *randomRun) serve(s *Stream) {
	defer r.serverActive.Add(-1)
	if n := int64(s.Conn().NumActiveStreams()); n > r.peakStreams.Load() {
		r.peakStreams.Store(n) // a sample: racing stores may lose a peak
	}
	hdrs := s.Headers()
	if len(hdrs) > 2 && hdrs[2].Value == "/sync" {
		if err := rWriteHeaders(s, append(randomRespFields[:1:1], trailersFor(0)...), true); err != nil {
			r.failf("sync: server WriteHeaders: %v", err)
		}
		s.Release()
		return
	}
	key, _ := strconv.ParseUint(hdrs[len(hdrs)-1].Value, 10, 64)
	x := r.exchange(key)
	if x == nil {
		r.failf("server: stream %d has no exchange (headers %v)", s.ID(), hdrs)
		s.Release()
		return
	}
	ts := r.track(s)
	rng := r.rng(key, 3)
	var wg sync.WaitGroup
	recvDone := make(chan struct{})
	if x.server != serverEarly || rng.IntN(2) == 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(recvDone)
			r.serverRecv(ts, x)
		}()
	} else {
		close(recvDone) // nobody reads the request
	}
	if x.server == serverReset {
		r.serverResets.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
			x.serverResetDone.Store(true)
			s.Reset(x.resetCode)
			r.step()
		}()
	}
	r.serverSend(ts, x, recvDone)
	wg.Wait()
	r.release(ts)
}

// serverRecv reads the request to its end.
func (r *randomRun) serverRecv(ts *trackedStream, x *exchange) {
	rng := r.rng(x.key, 4)
	s := ts.s
	rc := &receiver{r: r, name: fmt.Sprintf("stream key %d server", x.key), start: patternStart(x.key, dirRequest), into: rng.IntN(3) == 0, rng: rng}
	defer rc.done()
	for {
		err := rc.next(s)
		r.step()
		if err == io.EOF {
			break
		}
		if err != nil {
			if !streamErr(err) {
				r.failf("stream key %d: server Recv: %v, want an engine error", x.key, err)
			} else if !x.abandoned.Load() && !x.serverResetDone.Load() && x.server != serverEarly {
				r.failf("stream key %d (client %d, server %d): server Recv failed on a stream nobody cut short: %v", x.key, x.client, x.server, err)
			}
			return
		}
	}
	if want := x.reqIssued.Load(); rc.got != want {
		r.failf("stream key %d: request of %d bytes, the client sent %d", x.key, rc.got, want)
	}
	if n := sentCount(s.Trailers()); n >= 0 && n != rc.got {
		r.failf("stream key %d: request trailers say %d bytes, %d arrived", x.key, n, rc.got)
	}
}

// serverSend writes the response x.server plans.
func (r *randomRun) serverSend(ts *trackedStream, x *exchange, recvDone <-chan struct{}) {
	rng := r.rng(x.key, 5)
	start := patternStart(x.key, dirResponse)
	var off int64
	relaxed := x.server == serverReset
	msg := func() (*bufpool.Buffer, int) {
		n := randSize(rng)
		b := r.message(rng, start, off, n)
		x.respIssued.Add(int64(n))
		off += int64(n)
		return b, n
	}
	ok := func(what string, err error) bool {
		if err != nil {
			r.sendErr(x, "server", what, err, relaxed)
			return false
		}
		return true
	}
	switch x.server {
	case serverUnary:
		<-recvDone
		r.serverWhole(ts, x, rng, msg, ok)
	case serverEarly:
		r.early.Add(1)
		r.serverWhole(ts, x, rng, msg, ok)
	case serverStreaming, serverReset:
		msgs := rng.IntN(5)
		if rng.IntN(2) == 0 {
			if !ok("WriteHeaders", r.write(ts, func(s *Stream) error { return rWriteHeaders(s, randomRespFields, false) })) {
				return
			}
		} else {
			b, _ := msg()
			if !ok("WriteHeadersData", r.write(ts, func(s *Stream) error { return rWriteHeadersData(s, randomRespFields, b, false) })) {
				return
			}
		}
		for range msgs {
			b, _ := msg()
			hold := rng.IntN(4) == 0 // the next write follows at once
			if hold {
				rHoldFlush(ts.s)
			}
			if !ok("WriteData", r.write(ts, func(s *Stream) error { return rWriteData(s, b, false) })) {
				return
			}
			if !hold && rng.IntN(3) == 0 {
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
			}
		}
		if x.server == serverReset {
			return // the resetter ends it
		}
		<-recvDone
		switch rng.IntN(3) {
		case 0:
			tr := trailersFor(off)
			ok("WriteTrailers", r.write(ts, func(s *Stream) error { return rWriteTrailers(s, tr) }))
		case 1:
			b, _ := msg()
			ok("WriteData(end)", r.write(ts, func(s *Stream) error { return rWriteData(s, b, true) }))
		default:
			ok("CloseSend", r.write(ts, rCloseSend))
		}
	}
}

// serverWhole writes a whole response in one of the unary shapes.
func (r *randomRun) serverWhole(ts *trackedStream, x *exchange, rng *rand.Rand, msg func() (*bufpool.Buffer, int), ok func(string, error) bool) {
	switch rng.IntN(6) {
	case 0:
		b, _ := msg()
		tr := trailersFor(x.respIssued.Load())
		ok("WriteResponse", r.write(ts, func(s *Stream) error { return rWriteResponse(s, randomRespFields, b, tr) }))
	case 1:
		b, _ := msg()
		tr := trailersFor(x.respIssued.Load())
		// A failure after it returned is nobody's to hear (see there).
		ok("WriteResponseAsync", r.write(ts, func(s *Stream) error { return rWriteResponseAsync(s, randomRespFields, b, tr) }))
	case 2:
		b, _ := msg()
		tr := trailersFor(x.respIssued.Load())
		rHoldFlush(ts.s)
		if !ok("held WriteHeaders", r.write(ts, func(s *Stream) error { return rWriteHeaders(s, randomRespFields, false) })) {
			if b != nil {
				b.Free() // never handed to a write
			}
			return
		}
		rHoldFlush(ts.s)
		if !ok("held WriteData", r.write(ts, func(s *Stream) error { return rWriteData(s, b, false) })) {
			return
		}
		ok("WriteTrailers", r.write(ts, func(s *Stream) error { return rWriteTrailers(s, tr) }))
	case 3:
		b, _ := msg()
		tr := trailersFor(x.respIssued.Load())
		if !ok("WriteHeadersData", r.write(ts, func(s *Stream) error { return rWriteHeadersData(s, randomRespFields, b, false) })) {
			return
		}
		ok("WriteTrailers", r.write(ts, func(s *Stream) error { return rWriteTrailers(s, tr) }))
	case 4:
		b, _ := msg()
		ok("WriteHeadersData(end)", r.write(ts, func(s *Stream) error { return rWriteHeadersData(s, randomRespFields, b, true) }))
	default:
		// Trailers-only.
		tr := append(randomRespFields[:1:1], trailersFor(0)...)
		ok("trailers-only WriteHeaders", r.write(ts, func(s *Stream) error { return rWriteHeaders(s, tr, true) }))
	}
}
