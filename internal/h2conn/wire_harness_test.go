package h2conn_test

// The harness of the wire-level tests: an engine on one end of an h2test
// pipe, the scripted peer on the other, everything inside a synctest bubble
// so that timeouts cost nothing, and goroutine and pool checks at the end of
// every test.

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"testing/synctest"
	"time"

	xhpack "golang.org/x/net/http2/hpack"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// xDecoder is x/net's HPACK decoder, an oracle independent of ours, as the
// peer's HeaderDecoder.
type xDecoder struct{ d *xhpack.Decoder }

func newXDecoder() *xDecoder { return &xDecoder{xhpack.NewDecoder(4096, nil)} }

func (x *xDecoder) DecodeBlock(block []byte) ([]hpack.HeaderField, error) {
	fs, err := x.d.DecodeFull(block)
	out := make([]hpack.HeaderField, len(fs))
	for i, f := range fs {
		out[i] = hpack.HeaderField{Name: f.Name, Value: f.Value, Sensitive: f.Sensitive}
	}
	return out, err
}

// wireSynctest runs every wire test inside a testing/synctest bubble, where
// time is fake: timeouts cost nothing and timing assertions are exact. Set
// LEANGRPC_WIRE_SYNCTEST=0 to run them in real time instead.
var wireSynctest = os.Getenv("LEANGRPC_WIRE_SYNCTEST") != "0"

// wirePipe is the pipe every wire test uses unless it sets its own:
// LEANGRPC_WIRE_PIPE=chop1 makes every read return one byte, =random cuts
// reads at random sizes, each with a small write capacity, so that every
// rule is also checked across partial reads and blocked writes.
var wirePipe = map[string]h2test.PipeConfig{
	"chop1":  {ChopReads: h2test.ChopOne, Capacity: 512},
	"random": {ChopReads: h2test.ChopRandom, Capacity: 2048, Seed: 1},
}[os.Getenv("LEANGRPC_WIRE_PIPE")]

// quiet is how long a WantNothing listens.
const quiet = 200 * time.Millisecond

// wireRun runs a wire test body, in a synctest bubble when wireSynctest.
func wireRun(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if wireSynctest {
		// A connection made in the bubble keeps its streams out of the
		// process-wide spare pool, and its timers in the bubble
		// (h2conn's bubble.go).
		synctest.Test(t, f)
		return
	}
	f(t)
}

// settle lets the engine's goroutines finish what they are doing.
func settle() {
	if wireSynctest {
		synctest.Wait()
		return
	}
	time.Sleep(50 * time.Millisecond)
}

// eventually waits up to 5s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// early is how much sooner than its nominal time a timed event may be seen:
// in real time the test starts its clock a little after the engine did.
func early() time.Duration {
	if wireSynctest {
		return 0
	}
	return 50 * time.Millisecond
}

// slack is how late a timed event may be: nothing under fake time, more on
// a loaded machine in real time.
func slack() time.Duration {
	if wireSynctest {
		return 10 * time.Millisecond
	}
	return 2 * time.Second
}

// wireOpts tweaks a wire test.
type wireOpts struct {
	pipe h2test.PipeConfig
	// handler, for server tests, runs on the engine's reading goroutine;
	// nil records the streams in serverTest.streams.
	handler func(s *h2conn.Stream)
}

// serverTest is an engine playing the server against a scripted client.
type serverTest struct {
	t       *testing.T
	pool    *bufpool.Pool
	conn    *h2conn.Conn
	peer    *h2test.Peer
	nc, pc  *h2test.Conn // the engine's end, the peer's end
	streams chan *h2conn.Stream
	served  chan error // Serve's result
}

// newServerTest starts a server engine with cfg (cfg.Pool is set to a pool
// of the test's own). Call it inside a synctest bubble. It registers the
// leak checks and the teardown.
func newServerTest(t *testing.T, cfg h2conn.Config, o wireOpts) *serverTest {
	t.Helper()
	h2test.CheckGoroutines(t)
	st := &serverTest{t: t, pool: bufpool.New(nil), streams: make(chan *h2conn.Stream, 64), served: make(chan error, 1)}
	h2test.CheckPool(t, st.pool)
	cfg.Pool = st.pool
	if o.pipe == (h2test.PipeConfig{}) {
		o.pipe = wirePipe
	}
	st.nc, st.pc = h2test.Pipe(o.pipe)
	h := o.handler
	if h == nil {
		h = func(s *h2conn.Stream) { st.streams <- s }
	}
	st.conn = h2conn.NewServerConn(st.nc, cfg, h2conn.HandlerFunc(h))
	go func() { st.served <- st.conn.Serve() }()
	st.peer = h2test.NewPeer(t, st.pc, h2test.ClientRole)
	st.peer.Decoder = newXDecoder()
	t.Cleanup(st.teardown)
	return st
}

func (st *serverTest) teardown() {
	st.conn.Close()
	st.pc.Close()
	select {
	case <-st.served:
	case <-time.After(10 * time.Second):
		st.t.Errorf("Serve did not return 10s after Close")
	}
	// Release the streams the test did not finish with.
	for {
		select {
		case s := <-st.streams:
			s.Release()
		default:
			return
		}
	}
}

// greet runs the preface with the peer's settings.
func (st *serverTest) greet(settings ...h2frame.Setting) {
	st.t.Helper()
	st.peer.Greet(settings...)
}

// stream returns the next stream the engine handed to the handler.
func (st *serverTest) stream() *h2conn.Stream {
	st.t.Helper()
	select {
	case s := <-st.streams:
		return s
	case <-time.After(5 * time.Second):
		st.t.Fatalf("no stream reached the handler within 5s")
		return nil
	}
}

// noStream checks that no stream reached the handler.
func (st *serverTest) noStream() {
	st.t.Helper()
	select {
	case s := <-st.streams:
		st.t.Fatalf("stream %d reached the handler; want none", s.ID())
	default:
	}
}

// serveResult waits for Serve to return and returns its error.
func (st *serverTest) serveResult() error {
	st.t.Helper()
	select {
	case err := <-st.served:
		st.served <- err // teardown reads it again
		return err
	case <-time.After(10 * time.Second):
		st.t.Fatalf("Serve did not return within 10s")
		return nil
	}
}

// wantConnError checks the whole connection-error sequence: GOAWAY with
// code, the connection closed, and Serve returning an engine-initiated
// *h2conn.Error with code, which it returns (nil when it is not one).
func (st *serverTest) wantConnError(code h2frame.ErrCode) *h2conn.Error {
	st.t.Helper()
	st.peer.WantGoAway(code)
	st.peer.WantClosed()
	err := st.serveResult()
	var e *h2conn.Error
	if !errors.As(err, &e) || e.Code != code || e.StreamID != 0 {
		st.t.Errorf("Serve returned %v; want a connection *h2conn.Error with code %v", err, code)
		return nil
	} else if e.Initiator != h2conn.InitiatorEngine {
		st.t.Errorf("Serve's error initiator is %v; want engine", e.Initiator)
	}
	return e
}

// wantStreamOrConnError accepts either a RST_STREAM on id with code or a
// GOAWAY with code, where RFC 9113 lets the endpoint choose.
func (st *serverTest) wantStreamOrConnError(id uint32, code h2frame.ErrCode) {
	st.t.Helper()
	p := st.peer
	for {
		f, err := p.ReadFrame(5 * time.Second)
		if err != nil {
			st.t.Fatalf("want RST_STREAM(%d) or GOAWAY with %v: %v", id, code, err)
		}
		switch f.Type {
		case h2frame.TypeWindowUpdate, h2frame.TypeSettings, h2frame.TypePing:
			continue
		case h2frame.TypeRSTStream:
			if f.StreamID != id || f.ErrCode() != code {
				st.t.Fatalf("want RST_STREAM(%d, %v), got %v", id, code, f)
			}
			return
		case h2frame.TypeGoAway:
			if f.ErrCode() != code {
				st.t.Fatalf("want GOAWAY(%v), got %v", code, f)
			}
			p.WantClosed()
			return
		default:
			st.t.Fatalf("want RST_STREAM(%d) or GOAWAY with %v, got %v", id, code, f)
		}
	}
}

// stillUp checks that the connection answers a PING.
func (st *serverTest) stillUp() {
	st.t.Helper()
	d := [8]byte{'a', 'l', 'i', 'v', 'e'}
	st.peer.WritePing(d)
	st.peer.WantPingAck(d)
}

// request fields of a plain POST.
func reqFields(path string, extra ...string) []string {
	kv := []string{":method", "POST", ":scheme", "http", ":path", path, ":authority", "example.com"}
	return append(kv, extra...)
}

// readAll reads a stream's body to the end; it frees every buffer.
func readAll(s *h2conn.Stream) ([]byte, error) {
	var body []byte
	for {
		b, err := s.Recv()
		if err == io.EOF {
			return body, nil
		}
		if err != nil {
			return body, err
		}
		body = append(body, b.Bytes()...)
		b.Free() // Recv returned an owned buffer
	}
}

// respond answers a server stream with :status 200, body and trailers.
func respond(pool *bufpool.Pool, s *h2conn.Stream, body []byte) error {
	if err := s.Send(h2conn.HeadersItem(h2test.Fields(":status", "200"), false)); err != nil {
		return err
	}
	if len(body) > 0 {
		if err := s.Send(h2conn.DataItem(pool.Copy(body), false)); err != nil { // takes ownership
			return err
		}
	}
	return s.Send(h2conn.TrailersItem(h2test.Fields("grpc-status", "0")))
}

// echoHandler reads each request to the end and echoes it back.
func echoHandler(pool *bufpool.Pool, done chan<- error) func(*h2conn.Stream) {
	return func(s *h2conn.Stream) {
		go func() {
			defer s.Release()
			body, err := readAll(s)
			if err == nil {
				err = respond(pool, s, body)
			}
			if done != nil {
				done <- err
			}
		}()
	}
}

// clientTest is an engine playing the client against a scripted server.
type clientTest struct {
	t      *testing.T
	pool   *bufpool.Pool
	conn   *h2conn.Conn
	peer   *h2test.Peer
	nc, pc *h2test.Conn
}

// newClientTest starts a client engine with cfg over a pipe whose other end
// the peer plays as a server. Call it inside a synctest bubble.
func newClientTest(t *testing.T, cfg h2conn.Config, o wireOpts) *clientTest {
	t.Helper()
	h2test.CheckGoroutines(t)
	ct := &clientTest{t: t, pool: bufpool.New(nil)}
	h2test.CheckPool(t, ct.pool)
	cfg.Pool = ct.pool
	if o.pipe == (h2test.PipeConfig{}) {
		o.pipe = wirePipe
	}
	ct.nc, ct.pc = h2test.Pipe(o.pipe)
	c, err := h2conn.NewClientConn(ct.nc, cfg)
	if err != nil {
		t.Fatalf("NewClientConn: %v", err)
	}
	ct.conn = c
	ct.peer = h2test.NewPeer(t, ct.pc, h2test.ServerRole)
	ct.peer.Decoder = newXDecoder()
	t.Cleanup(func() {
		ct.conn.Close()
		ct.pc.Close()
		select {
		case <-ct.conn.Done():
		case <-time.After(10 * time.Second):
			t.Errorf("client connection not done 10s after Close")
		}
	})
	return ct
}

// open opens a client stream with a plain request, with END_STREAM when
// endStream, checks that its HEADERS reached the peer, and releases it when
// the test ends.
func (ct *clientTest) open(path string, endStream bool) *h2conn.Stream {
	ct.t.Helper()
	s, err := ct.conn.NewStream(context.Background(), h2test.Fields(reqFields(path)...), h2conn.StreamOptions{EndStream: endStream})
	if err != nil {
		ct.t.Fatalf("NewStream: %v", err)
	}
	ct.t.Cleanup(s.Release)
	ct.peer.WantHeaders(s.ID())
	return s
}

// sendWithCredit sends total bytes of DATA on stream id, END_STREAM on the
// last frame when end, never beyond the windows the peer knows of; when
// they are closed it listens for WINDOW_UPDATEs, failing if the credit
// stops coming back.
func sendWithCredit(t *testing.T, p *h2test.Peer, id uint32, total int, end bool) {
	t.Helper()
	chunk := make([]byte, h2frame.MinMaxFrameSize)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	sent, stalls := 0, 0
	for sent < total {
		conn, stream := p.SendWindow(id)
		n := int(min(conn, stream, int64(len(chunk)), int64(total-sent)))
		if n <= 0 {
			if stalls++; stalls > 100 {
				t.Fatalf("sender stalled after %d of %d bytes: windows conn %d stream %d", sent, total, conn, stream)
			}
			p.WantNothing(50 * time.Millisecond) // takes in WINDOW_UPDATEs
			continue
		}
		p.WriteData(id, end && sent+n == total, chunk[:n])
		sent += n
	}
}

// wantH2Error checks that err is an *h2conn.Error with code and initiator.
func wantH2Error(t *testing.T, err error, code h2frame.ErrCode, who h2conn.Initiator) *h2conn.Error {
	t.Helper()
	var e *h2conn.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T); want an *h2conn.Error", err, err)
	}
	if e.Code != code || e.Initiator != who {
		t.Fatalf("error %v: code %v initiator %v; want %v by %v", err, e.Code, e.Initiator, code, who)
	}
	return e
}

func setting(id h2frame.SettingID, v uint32) h2frame.Setting { return h2frame.Setting{ID: id, Val: v} }
