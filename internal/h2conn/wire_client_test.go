package h2conn_test

// Wire-level tests of the client role: the scripted peer plays the server.

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// RFC 9113 §3.4: the client sends the preface and SETTINGS first, and
// acknowledges the server's SETTINGS.
func TestWireClientPreface(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{MaxConcurrentStreams: 5, InitialStreamWindow: 70000}, wireOpts{})
		p := ct.peer
		p.Greet(setting(h2frame.SettingMaxConcurrentStreams, 9)) // checks preface, SETTINGS first, and the ACK
		if v := p.RemoteSettings[h2frame.SettingInitialWindowSize]; v != 70000 {
			t.Errorf("client INITIAL_WINDOW_SIZE = %d; want 70000", v)
		}
		if v, ok := p.RemoteSettings[h2frame.SettingEnablePush]; !ok || v != 0 {
			t.Errorf("client ENABLE_PUSH = %d (sent %v); want 0 sent", v, ok)
		}
		eventually(t, "PeerSetting(MAX_CONCURRENT_STREAMS) = 9", func() bool {
			return ct.conn.PeerSetting(h2frame.SettingMaxConcurrentStreams) == 9
		})
	})
}

// A request and its response: the request pseudo-headers on the wire, the
// response headers, body and trailers through the Stream API.
func TestWireClientRoundTrip(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		s, err := ct.conn.NewStream(context.Background(), h2test.Fields(reqFields("/svc/M", "content-type", "application/grpc")...), h2conn.StreamOptions{})
		if err != nil {
			t.Fatalf("NewStream: %v", err)
		}
		defer s.Release()
		if s.ID() != 1 {
			t.Errorf("first stream id %d; want 1", s.ID())
		}
		if err := s.Send(h2conn.DataItem(ct.pool.Copy([]byte("req")), true)); err != nil {
			t.Fatalf("WriteData: %v", err)
		}
		h := p.WantHeaders(1)
		if h.Get(":method") != "POST" || h.Get(":path") != "/svc/M" || h.Get(":scheme") != "http" || h.EndStream {
			t.Fatalf("request headers:\n%s", h2test.FormatFields(h.Fields))
		}
		if body := p.WantBody(1, true); string(body) != "req" {
			t.Fatalf("request body %q", body)
		}
		hblock := h2test.EncodeHeaders(h2test.Fields(":status", "200", "content-type", "application/grpc")...)
		tblock := h2test.EncodeHeaders(h2test.Fields("grpc-status", "0")...)
		p.WriteHeadersBlock(1, h2frame.FlagEndHeaders, hblock)
		p.WriteData(1, false, []byte("resp"))
		p.WriteHeadersBlock(1, h2frame.FlagEndHeaders|h2frame.FlagEndStream, tblock)
		fields, end, err := s.RecvHeaders()
		if err != nil || end {
			t.Fatalf("RecvHeaders: %v end=%v", err, end)
		}
		if v, _ := h2test.Header(fields, ":status"); v != "200" {
			t.Fatalf("response headers:\n%s", h2test.FormatFields(fields))
		}
		body, err := readAll(s)
		if err != nil || string(body) != "resp" {
			t.Fatalf("body %q, %v", body, err)
		}
		if v, _ := h2test.Header(s.Trailers(), "grpc-status"); v != "0" {
			t.Fatalf("trailers:\n%s", h2test.FormatFields(s.Trailers()))
		}
		if h, tr := s.HeadersWireLength(), s.TrailersWireLength(); h != len(hblock) || tr != len(tblock) {
			t.Errorf("wire lengths: headers %d, trailers %d; want %d, %d", h, tr, len(hblock), len(tblock))
		}
		select {
		case <-s.Done():
		case <-time.After(time.Second):
			t.Fatalf("stream not done after both ends ended it")
		}
	})
}

// RFC 9113 §8.3.2: a response without :status, or with request
// pseudo-headers, is malformed: the client resets the stream with
// PROTOCOL_ERROR and the caller gets an error.
func TestWireClientMalformedResponse(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   []string
	}{
		{"no status", []string{"content-type", "text/plain"}},
		{"request pseudo", []string{":status", "200", ":path", "/"}},
		{"non-numeric status", []string{":status", "abc"}},
		{"uppercase", []string{":status", "200", "X-Up", "v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				ct := newClientTest(t, h2conn.Config{}, wireOpts{})
				p := ct.peer
				p.Greet()
				s := ct.open("/", true)
				p.WriteHeaders(1, false, tc.kv...)
				if _, _, err := s.RecvHeaders(); err == nil {
					t.Fatalf("RecvHeaders accepted a malformed response")
				}
				p.WantRST(1, h2frame.ErrCodeProtocol)
			})
		})
	}
}

// RFC 9113 §6.4: RST_STREAM from the server fails the stream with its code
// and the peer as initiator; REFUSED_STREAM marks it unprocessed.
func TestWireClientRSTFromServer(t *testing.T) {
	for _, tc := range []struct {
		code        h2frame.ErrCode
		unprocessed bool
	}{
		{h2frame.ErrCodeCancel, false},
		{h2frame.ErrCodeRefusedStream, true},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				ct := newClientTest(t, h2conn.Config{}, wireOpts{})
				p := ct.peer
				p.Greet()
				s := ct.open("/", false)
				p.WriteRST(1, tc.code)
				_, _, err := s.RecvHeaders()
				e := wantH2Error(t, err, tc.code, h2conn.InitiatorPeer)
				if e.Unprocessed != tc.unprocessed {
					t.Errorf("Unprocessed = %v; want %v", e.Unprocessed, tc.unprocessed)
				}
				if e.StreamID != 1 {
					t.Errorf("error stream %d; want 1", e.StreamID)
				}
				if err := s.Send(h2conn.DataItem(ct.pool.Copy([]byte("x")), true)); err == nil {
					t.Errorf("WriteData on a reset stream succeeded")
				}
				p.WantNothing(quiet) // no RST_STREAM in reply
			})
		})
	}
}

// RFC 9113 §6.8: after GOAWAY, streams above its last stream id fail as
// unprocessed (retryable), streams at or below it go on, and NewStream
// fails with ErrGoingAway.
func TestWireClientGoAway(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		ctx := context.Background()
		s1 := ct.open("/1", true)
		s3 := ct.open("/3", true)
		p.WriteGoAway(1, h2frame.ErrCodeNo, "draining")
		_, _, err := s3.RecvHeaders()
		var e *h2conn.Error
		if !errors.As(err, &e) || !e.Unprocessed {
			t.Fatalf("stream 3 above the GOAWAY: %v; want an unprocessed *h2conn.Error", err)
		}
		select {
		case <-ct.conn.GoingAway():
		case <-time.After(time.Second):
			t.Fatalf("GoingAway not closed after GOAWAY")
		}
		if _, err := ct.conn.NewStream(ctx, h2test.Fields(reqFields("/5")...), h2conn.StreamOptions{EndStream: true}); !errors.Is(err, h2conn.ErrGoingAway) {
			t.Fatalf("NewStream after GOAWAY: %v; want ErrGoingAway", err)
		}
		p.WriteHeaders(1, true, ":status", "200")
		if _, end, err := s1.RecvHeaders(); err != nil || !end {
			t.Fatalf("stream 1 below the GOAWAY: %v end=%v", err, end)
		}
	})
}

// RFC 9113 §5.1.2: the client queues new streams while the server's
// MAX_CONCURRENT_STREAMS is reached and opens them when a slot frees.
func TestWireClientQueueing(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet(setting(h2frame.SettingMaxConcurrentStreams, 1))
		ctx := context.Background()
		ct.open("/1", true)
		opened := make(chan *h2conn.Stream, 1)
		go func() {
			s, err := ct.conn.NewStream(ctx, h2test.Fields(reqFields("/3")...), h2conn.StreamOptions{EndStream: true})
			if err != nil {
				t.Errorf("queued NewStream: %v", err)
				close(opened)
				return
			}
			opened <- s
		}()
		p.WantNothing(quiet)
		select {
		case <-opened:
			t.Fatalf("second stream opened beyond MAX_CONCURRENT_STREAMS=1")
		default:
		}
		p.WriteHeaders(1, true, ":status", "200") // stream 1 closes
		p.WantHeaders(3)
		if s3 := <-opened; s3 != nil {
			defer s3.Release() // releasing an open stream would free its slot
		}
		// A waiting NewStream gives up with its context.
		p.WriteHeaders(3, false, ":status", "200") // stream 3 stays open
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := ct.conn.NewStream(cctx, h2test.Fields(reqFields("/5")...), h2conn.StreamOptions{EndStream: true}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("NewStream with no slot and a short context: %v; want DeadlineExceeded", err)
		}
	})
}

// The client answers the server's PING.
func TestWireClientPingAnswered(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		delete(p.Ignore, h2frame.TypePing)
		d := [8]byte{'s', 'r', 'v'}
		p.WritePing(d)
		p.WantPingAck(d)
	})
}

// Client keepalive: a PING after KeepaliveTime idle, and the connection
// closed when the ACK does not come within KeepaliveTimeout. The engine
// re-arms its timer for a whole KeepaliveTime after seeing activity, so the
// first PING may come up to twice KeepaliveTime after the last frame
// (TestWireClientKeepalivePingTime holds the precise rule).
func TestWireClientKeepalive(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		cfg := h2conn.Config{KeepaliveTime: time.Second, KeepaliveTimeout: 500 * time.Millisecond, KeepalivePermitWithoutStream: true}
		ct := newClientTest(t, cfg, wireOpts{})
		p := ct.peer
		p.Greet()
		delete(p.Ignore, h2frame.TypePing)
		start := time.Now()
		d := p.WantPing()
		if el := time.Since(start); el < time.Second-early() || el > 2*time.Second+slack() {
			t.Errorf("first keepalive PING after %v; want 1s to 2s", el)
		}
		p.WritePingAck(d)
		p.WantPing() // not answered
		start = time.Now()
		p.WantClosed()
		if el := time.Since(start); el < 500*time.Millisecond-early() || el > 500*time.Millisecond+slack() {
			t.Errorf("closed %v after the unanswered PING; want 500ms", el)
		}
		select {
		case <-ct.conn.Done():
		case <-time.After(time.Second):
			t.Fatalf("connection not done after the keepalive timeout")
		}
		if _, err := ct.conn.NewStream(context.Background(), h2test.Fields(reqFields("/")...), h2conn.StreamOptions{EndStream: true}); !errors.Is(err, h2conn.ErrConnClosed) {
			t.Errorf("NewStream on a dead connection: %v; want ErrConnClosed", err)
		}
	})
}

// grpc-go's keepalive rule: the client pings KeepaliveTime after the last
// frame it read, not later.
func TestWireClientKeepalivePingTime(t *testing.T) {
	if !wireSynctest {
		t.Skip("needs exact time: runs in synctest bubbles only")
	}
	wireRun(t, func(t *testing.T) {
		cfg := h2conn.Config{KeepaliveTime: time.Second, KeepaliveTimeout: 500 * time.Millisecond, KeepalivePermitWithoutStream: true}
		ct := newClientTest(t, cfg, wireOpts{})
		p := ct.peer
		p.Greet()
		delete(p.Ignore, h2frame.TypePing)
		for range 3 {
			time.Sleep(700 * time.Millisecond)
			p.WritePing([8]byte{1}) // activity
			p.WantPingAck([8]byte{1})
			start := time.Now()
			d := p.WantPing()
			if el := time.Since(start); el != time.Second {
				t.Fatalf("keepalive PING %v after the last frame read; want 1s", el)
			}
			p.WritePingAck(d)
		}
	})
}

// RFC 9113 §8.4: a client never enables push, and a PUSH_PROMISE is a
// connection error PROTOCOL_ERROR.
func TestWireClientPushPromise(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		s := ct.open("/", true)
		p.WriteRaw(h2frame.TypePushPromise, h2frame.FlagEndHeaders, 1, append([]byte{0, 0, 0, 2}, h2test.EncodeHeaders(h2test.Fields(reqFields("/")...)...)...))
		p.WantGoAway(h2frame.ErrCodeProtocol)
		p.WantClosed()
		if _, _, err := s.RecvHeaders(); err == nil {
			t.Errorf("RecvHeaders succeeded on a failed connection")
		}
	})
}

// A large request body flows under a server that grants window slowly.
func TestWireClientLargeUpload(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{pipe: h2test.PipeConfig{ChopReads: h2test.ChopRandom, Capacity: 5000, Seed: 3}})
		p := ct.peer
		const step = 8192
		p.Greet(setting(h2frame.SettingInitialWindowSize, step))
		body := make([]byte, 300000)
		for i := range body {
			body[i] = byte(i)
		}
		s, err := ct.conn.NewStream(context.Background(), h2test.Fields(reqFields("/up")...), h2conn.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release()
		werr := make(chan error, 1)
		go func() { werr <- s.Send(h2conn.DataItem(ct.pool.Copy(body), true)) }()
		p.WantHeaders(1)
		connWin, streamWin := int64(65535), int64(step)
		var got []byte
		for {
			f := p.WantData(1)
			connWin -= int64(f.Length)
			streamWin -= int64(f.Length)
			if connWin < 0 || streamWin < 0 {
				t.Fatalf("client overran the windows: conn %d stream %d", connWin, streamWin)
			}
			got = append(got, f.Data()...)
			if f.EndStream() {
				break
			}
			if streamWin < step/4 {
				p.WriteWindowUpdate(1, uint32(step-streamWin))
				streamWin = step
			}
			if connWin < step {
				p.WriteWindowUpdate(0, step)
				connWin += step
			}
		}
		if string(got) != string(body) {
			t.Fatalf("server received %d bytes, not the body", len(got))
		}
		if err := <-werr; err != nil {
			t.Fatalf("WriteData: %v", err)
		}
		p.WriteHeaders(1, true, ":status", "200")
		if _, end, err := s.RecvHeaders(); err != nil || !end {
			t.Fatalf("RecvHeaders: %v end=%v", err, end)
		}
		if _, err := s.Recv(); err != io.EOF {
			t.Fatalf("Recv after a trailers-only end: %v; want io.EOF", err)
		}
	})
}

// RFC 9113 §6.10: a request header block larger than the peer's max frame
// size goes out as HEADERS plus CONTINUATION frames, none above the size,
// nothing in between, and decodes whole.
func TestWireClientLargeHeadersContinuation(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		big := strings.Repeat("0123456789", 5000) // 50 KB: about 31 KB with Huffman
		fields := h2test.Fields(reqFields("/", "x-big", big)...)
		s, err := ct.conn.NewStream(context.Background(), fields, h2conn.StreamOptions{EndStream: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Release)
		f := p.WantFrame(h2frame.TypeHeaders)
		if f.Flags.Has(h2frame.FlagEndHeaders) {
			t.Fatalf("a 50 KB block in one HEADERS frame of %d bytes", f.Length)
		}
		block := append([]byte(nil), f.BlockFragment()...)
		frames := 1
		for end := false; !end; frames++ {
			c, err := p.ReadFrame(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if c.Type != h2frame.TypeContinuation || c.StreamID != 1 {
				t.Fatalf("got %v inside a header block; want CONTINUATION on stream 1", c)
			}
			if c.Length > h2frame.MinMaxFrameSize {
				t.Fatalf("CONTINUATION of %d bytes above the 16 KiB max frame size", c.Length)
			}
			block = append(block, c.Payload...)
			end = c.Flags.Has(h2frame.FlagEndHeaders)
		}
		got, err := p.Decoder.DecodeBlock(block)
		if err != nil {
			t.Fatalf("decoding the reassembled block: %v", err)
		}
		if v, _ := h2test.Header(got, "x-big"); v != big {
			t.Fatalf("x-big came back with %d bytes; want %d", len(v), len(big))
		}
		if least := (len(block) + h2frame.MinMaxFrameSize - 1) / h2frame.MinMaxFrameSize; frames > least+1 {
			t.Errorf("%d frames for a %d-byte block; %d would do", frames, len(block), least)
		}
	})
}

// RFC 9113 §5.1: DATA a server sent before it learned that the client
// reset the stream is ignored: no RST_STREAM in reply, and however much
// of it comes (a client abandoning many calls while their servers
// stream), it does not count as the server causing resets, which would
// end the connection with ENHANCE_YOUR_CALM.
func TestWireClientIgnoresDataAfterItsReset(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		s := ct.open("/", true)
		s.Reset(h2frame.ErrCodeCancel)
		p.WantRST(1, h2frame.ErrCodeCancel)
		for range 1200 { // more than the reset limit's window allows
			p.WriteData(1, false, []byte("x"))
		}
		p.WantNothing(quiet)
		s2 := ct.open("/", true) // the connection lives on
		p.WriteHeaders(s2.ID(), true, ":status", "200")
		if _, _, err := s2.RecvHeaders(); err != nil {
			t.Fatalf("a new stream after the late DATA: %v", err)
		}
	})
}
