package h2conn_test

// Wire-level tests of connection management (idle, age, server keepalive,
// abrupt ends, floods) and of the finer framing rules, in both roles.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	xhpack "golang.org/x/net/http2/hpack"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// grpc-go's MaxConnectionIdle: a connection without streams for that long
// gets a graceful GOAWAY and closes.
func TestWireMaxConnectionIdle(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{MaxConnectionIdle: 500 * time.Millisecond}, wireOpts{})
		st.greet()
		start := time.Now()
		p := st.peer
		p.WantGoAway(h2frame.ErrCodeNo)
		if d := time.Since(start); d < 500*time.Millisecond-early() || d > 500*time.Millisecond+slack() {
			t.Errorf("GOAWAY after %v idle; want 500ms", d)
		}
		// The first GOAWAY comes with a PING, which the peer answers; the
		// final one refuses every stream.
		if g := p.WantGoAway(h2frame.ErrCodeNo); g.LastStreamID() != 0 {
			t.Errorf("final GOAWAY last stream %d; want 0", g.LastStreamID())
		}
		p.WantClosed()
		if err := st.serveResult(); err != nil {
			t.Errorf("Serve after an idle close: %v; want nil", err)
		}
	})
}

// grpc-go's MaxConnectionAge and MaxConnectionAgeGrace: a graceful GOAWAY
// at the age, then a hard close after the grace even with a stream open.
func TestWireMaxConnectionAge(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		cfg := h2conn.Config{MaxConnectionAge: 500 * time.Millisecond, MaxConnectionAgeGrace: 500 * time.Millisecond}
		st := newServerTest(t, cfg, wireOpts{})
		st.greet()
		start := time.Now()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream() // held open past the grace
		g := p.WantGoAway(h2frame.ErrCodeNo)
		if d := time.Since(start); d < 500*time.Millisecond-early() || d > 500*time.Millisecond+slack() {
			t.Errorf("GOAWAY at age %v; want 500ms", d)
		}
		if g.LastStreamID() < 1 {
			t.Errorf("GOAWAY last stream %d refuses the open stream 1", g.LastStreamID())
		}
		p.WantClosed()
		if d := time.Since(start); d < time.Second-early() || d > time.Second+slack() {
			t.Errorf("closed at %v; want age + grace = 1s", d)
		}
		if _, err := s.Recv(); err == nil {
			t.Errorf("Recv on a stream of a closed connection succeeded")
		}
	})
}

// Server keepalive: the server pings an idle connection and closes it when
// the ACK does not come.
func TestWireServerKeepalive(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		cfg := h2conn.Config{ServerKeepaliveTime: 300 * time.Millisecond, ServerKeepaliveTimeout: 200 * time.Millisecond}
		st := newServerTest(t, cfg, wireOpts{})
		st.greet()
		p := st.peer
		delete(p.Ignore, h2frame.TypePing)
		d := p.WantPing()
		p.WritePingAck(d)
		p.WantPing() // not answered
		start := time.Now()
		p.WantClosed()
		if el := time.Since(start); el < 200*time.Millisecond-early() || el > 200*time.Millisecond+slack() {
			t.Errorf("closed %v after the unanswered PING; want 200ms", el)
		}
		st.serveResult()
		var e *h2conn.Error
		if err := st.conn.Err(); !errors.As(err, &e) || e.Reason != "keepalive_timeout" {
			t.Errorf("Err after an unanswered keepalive PING: %v; want keepalive_timeout", err)
		}
	})
}

// RFC 9113 §6.1: padding counts against flow control.
func TestWirePaddingCountsAgainstWindow(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: 100, DisableBDP: true}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		p.WriteDataPadded(1, false, make([]byte, 50), 49) // 100 bytes of window
		b, err := s.Recv()
		if err != nil || b.Len() != 50 {
			t.Fatalf("Recv: %v, %v; want the 50 data bytes without padding", b, err)
		}
		b.Free() // Recv returned an owned buffer
		p.WantNothing(quiet)
		// The 50 data bytes were consumed and the padding given back: the
		// window may have been credited. Overrun whatever is left.
		_, win := p.SendWindow(1)
		p.WriteDataPadded(1, false, make([]byte, win), 0) // win+1 bytes
		st.wantStreamOrConnError(1, h2frame.ErrCodeFlowControl)
	})
}

// RFC 9113 §6.1, §6.2: a pad length not shorter than the payload is a
// connection error PROTOCOL_ERROR.
func TestWirePadLengthTooLarge(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream()
		p.WriteRaw(h2frame.TypeData, h2frame.FlagPadded, 1, []byte{5, 'a', 'b'})
		st.wantConnError(h2frame.ErrCodeProtocol)
	})
}

// RFC 9113 §8.1: a second HEADERS (trailers) must carry END_STREAM.
func TestWireTrailersWithoutEndStream(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream()
		p.WriteData(1, false, []byte("body"))
		p.WriteHeaders(1, false, "x-trailer", "v")
		st.wantStreamOrConnError(1, h2frame.ErrCodeProtocol)
	})
}

// Trailers from the client reach the handler after the body.
func TestWireRequestTrailers(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		p.WriteData(1, false, []byte("body"))
		p.WriteHeaders(1, true, "x-trailer", "v")
		body, err := readAll(s)
		if err != nil || string(body) != "body" {
			t.Fatalf("body %q, %v", body, err)
		}
		if v, _ := h2test.Header(s.Trailers(), "x-trailer"); v != "v" {
			t.Fatalf("trailers:\n%s", h2test.FormatFields(s.Trailers()))
		}
	})
}

// The peer closing the socket mid-stream fails the streams with an error
// matching ErrConnClosed, ends Serve, and leaks nothing.
func TestWirePeerClosesMidStream(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		p.WriteData(1, false, []byte("partial"))
		recvErr := make(chan error, 1)
		go func() {
			_, err := readAll(s)
			recvErr <- err
		}()
		time.Sleep(50 * time.Millisecond)
		p.Close()
		select {
		case err := <-recvErr:
			if !errors.Is(err, h2conn.ErrConnClosed) {
				t.Errorf("Recv after the peer vanished: %v; want ErrConnClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Recv still blocked 5s after the peer closed the connection")
		}
		st.serveResult()
		if err := s.Send(h2conn.HeadersItem(h2test.Fields(":status", "200"), true)); err == nil {
			t.Errorf("WriteHeaders on a dead connection succeeded")
		}
	})
}

// RFC 9113 §4.2: the engine sends DATA frames up to the peer's
// SETTINGS_MAX_FRAME_SIZE, never above.
func TestWirePeerMaxFrameSize(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		body := bytes.Repeat([]byte("0123456789abcdef"), 10000) // 160 KB
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.peer.Greet(setting(h2frame.SettingMaxFrameSize, 1<<15), setting(h2frame.SettingInitialWindowSize, 1<<20))
		p := st.peer
		p.WriteWindowUpdate(0, 1<<20)
		p.WriteHeaders(1, true, reqFields("/")...)
		s := st.stream()
		errc := make(chan error, 1)
		go func() { errc <- respond(st.pool, s, body) }()
		p.WantHeaders(1)
		var got []byte
		largest := uint32(0)
		for len(got) < len(body) {
			f := p.WantData(1)
			if f.Length > 1<<15 {
				t.Fatalf("DATA of %d bytes above the peer's 32 KiB max frame size", f.Length)
			}
			largest = max(largest, f.Length)
			got = append(got, f.Data()...)
		}
		if largest <= h2frame.MinMaxFrameSize {
			t.Errorf("largest DATA frame %d bytes: the larger max frame size went unused", largest)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("body differs")
		}
		p.WantHeaders(1)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}

// RFC 7541 §4.2, RFC 9113 §6.5.2: with the peer's SETTINGS_HEADER_TABLE_SIZE
// at 0, the engine's header blocks never use the dynamic table.
func TestWirePeerHeaderTableSizeZero(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		p := st.peer
		dec := xhpack.NewDecoder(0, nil) // refuses any dynamic table entry
		p.Decoder = decoderFunc(func(block []byte) ([]hpack.HeaderField, error) {
			fs, err := dec.DecodeFull(block)
			out := make([]hpack.HeaderField, len(fs))
			for i, f := range fs {
				out[i] = hpack.HeaderField{Name: f.Name, Value: f.Value}
			}
			return out, err
		})
		p.Greet(setting(h2frame.SettingHeaderTableSize, 0))
		for id := uint32(1); id <= 5; id += 2 {
			p.WriteHeaders(id, true, reqFields("/")...)
			s := st.stream()
			if err := s.Send(h2conn.HeadersItem(h2test.Fields(":status", "200", "x-custom", "same-value-each-time"), true)); err != nil {
				t.Fatal(err)
			}
			if h := p.WantHeaders(id); h.Get("x-custom") != "same-value-each-time" {
				t.Fatalf("response %d:\n%s", id, h2test.FormatFields(h.Fields))
			}
		}
	})
}

type decoderFunc func([]byte) ([]hpack.HeaderField, error)

func (f decoderFunc) DecodeBlock(b []byte) ([]hpack.HeaderField, error) { return f(b) }

// ExpectMessage widens the stream window at once so a large message does
// not wait for quarter-window updates.
func TestWireExpectMessageWidensWindow(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: 65535, DisableBDP: true}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		s.ExpectMessage(1 << 20)
		inc := p.WantWindowUpdate(1)
		if _, win := p.SendWindow(1); win < 1<<20 {
			t.Fatalf("stream window %d after ExpectMessage(1 MiB) (increment %d); want at least 1 MiB", win, inc)
		}
	})
}

// A peer that floods PINGs while never reading cannot make the engine
// queue replies without bound: it gives up on the connection.
func TestWireControlFloodAgainstNonReader(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{PingMinTime: -1, PingPermitWithoutStream: true}, wireOpts{})
		st.greet()
		st.nc.SetWriteCapacity(4096) // the engine's writes stall once 4 KiB are unread
		p := st.peer
		flood := make([]byte, 0, 17*1000)
		for i := range 1000 {
			flood = h2test.AppendFrame(flood, h2frame.TypePing, 0, 0, []byte{byte(i), 0, 0, 0, 0, 0, 0, 0})
		}
		for range 20 {
			p.WriteBytes(flood) // 20000 PINGs, none of the ACKs read
			if p.WriteErr != nil {
				break
			}
		}
		err := st.serveResult()
		var e *h2conn.Error
		if !errors.As(err, &e) || e.Code != h2frame.ErrCodeEnhanceYourCalm {
			t.Errorf("Serve after a PING flood: %v; want ENHANCE_YOUR_CALM", err)
		}
		p.WantClosed()
	})
}

// RFC 9113 §5.1.1: client stream ids are odd and increase.
func TestWireClientStreamIDs(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		for _, want := range []uint32{1, 3, 5} {
			s, err := ct.conn.NewStream(context.Background(), h2test.Fields(reqFields("/")...), h2conn.StreamOptions{EndStream: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Release()
			if s.ID() != want {
				t.Errorf("stream id %d; want %d", s.ID(), want)
			}
			p.WantHeaders(want)
		}
	})
}

// RFC 9113 §6.9.1: DATA beyond the client's stream window draws
// FLOW_CONTROL_ERROR.
func TestWireClientDataBeyondWindow(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{InitialStreamWindow: 1000, DisableBDP: true}, wireOpts{})
		p := ct.peer
		p.Greet()
		ct.open("/", true)
		p.WriteHeaders(1, false, ":status", "200")
		p.WriteData(1, false, make([]byte, 1001))
		f := p.WantOneOf(h2frame.TypeRSTStream, h2frame.TypeGoAway)
		if f.ErrCode() != h2frame.ErrCodeFlowControl {
			t.Fatalf("got %v; want FLOW_CONTROL_ERROR", f)
		}
	})
}

// The client's Reset sends RST_STREAM with the code.
func TestWireClientReset(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		s := ct.open("/", false)
		s.Reset(h2frame.ErrCodeCancel)
		p.WantRST(1, h2frame.ErrCodeCancel)
		_, err := s.Recv()
		wantH2Error(t, err, h2frame.ErrCodeCancel, h2conn.InitiatorUser)
	})
}

// Close sends GOAWAY(NO_ERROR), closes the socket and fails open streams
// with an error matching ErrConnClosed.
func TestWireClientClose(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		s := ct.open("/", true)
		ct.conn.Close()
		p.WantGoAway(h2frame.ErrCodeNo)
		p.WantClosed()
		if _, _, err := s.RecvHeaders(); !errors.Is(err, h2conn.ErrConnClosed) {
			t.Errorf("RecvHeaders after Close: %v; want ErrConnClosed", err)
		}
		if _, err := ct.conn.NewStream(context.Background(), h2test.Fields(reqFields("/")...), h2conn.StreamOptions{EndStream: true}); !errors.Is(err, h2conn.ErrConnClosed) {
			t.Errorf("NewStream after Close: %v; want ErrConnClosed", err)
		}
	})
}

// RFC 9113 §8.1: informational 1xx responses are skipped by RecvHeaders.
func TestWireClientInformationalSkipped(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		s := ct.open("/", true)
		p.WriteHeaders(1, false, ":status", "100")
		p.WriteHeaders(1, true, ":status", "204")
		fields, end, err := s.RecvHeaders()
		if v, _ := h2test.Header(fields, ":status"); err != nil || v != "204" || !end {
			t.Fatalf("RecvHeaders: %v end=%v err=%v; want the 204", fields, end, err)
		}
	})
}

// The client's receive window is credited back as the caller reads, so a
// response larger than the window arrives whole.
func TestWireClientWindowUpdates(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{InitialStreamWindow: 65535, InitialConnWindow: 65535, DisableBDP: true}, wireOpts{})
		p := ct.peer
		p.Greet()
		s := ct.open("/", true)
		p.WriteHeaders(1, false, ":status", "200")
		const total = 5 * 65535
		body := make(chan []byte, 1)
		go func() {
			if _, _, err := s.RecvHeaders(); err != nil {
				t.Errorf("RecvHeaders: %v", err)
			}
			b, err := readAll(s)
			if err != nil {
				t.Errorf("Recv: %v", err)
			}
			body <- b
		}()
		sendWithCredit(t, p, 1, total, true)
		if b := <-body; len(b) != total {
			t.Fatalf("client read %d bytes; want %d", len(b), total)
		}
	})
}
