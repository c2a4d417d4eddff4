package h2conn_test

// Wire-level tests of hostile peers: each attacker-controlled count meets
// its named limit and gets ENHANCE_YOUR_CALM (or the RFC's code) instead of
// costing unbounded work or memory. Also the frames RFC 9113 says must be
// tolerated, which an over-eager engine would refuse.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// The 2023 "rapid reset" attack (CVE-2023-44487): streams opened and reset
// at once, over and over, end with GOAWAY ENHANCE_YOUR_CALM.
func TestWireRapidReset(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{handler: func(*h2conn.Stream) {}})
		st.greet()
		p := st.peer
		block := h2test.EncodeHeaders(h2test.Fields(reqFields("/")...)...)
		var burst []byte
		for id := uint32(1); id < 2*3000; id += 2 {
			burst = h2test.AppendFrame(burst, h2frame.TypeHeaders, h2frame.FlagEndHeaders, id, block)
			burst = h2test.AppendFrame(burst, h2frame.TypeRSTStream, 0, id, []byte{0, 0, 0, byte(h2frame.ErrCodeCancel)})
		}
		p.WriteBytes(burst) // 3000 resets at once
		if e := st.wantConnError(h2frame.ErrCodeEnhanceYourCalm); e != nil && e.Reason != "reset_flood" {
			t.Errorf("reason %q; want reset_flood", e.Reason)
		}
	})
}

// Empty DATA frames without END_STREAM carry nothing and cost a dispatch
// each: a flood of them ends with ENHANCE_YOUR_CALM.
func TestWireEmptyDataFlood(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream()
		var burst []byte
		for range 5000 {
			burst = h2test.AppendFrame(burst, h2frame.TypeData, 0, 1, nil)
		}
		p.WriteBytes(burst)
		if e := st.wantConnError(h2frame.ErrCodeEnhanceYourCalm); e != nil && e.Reason != "empty_data_flood" {
			t.Errorf("reason %q; want empty_data_flood", e.Reason)
		}
	})
}

// settingsBurst is n SETTINGS frames, each a new INITIAL_WINDOW_SIZE as a
// BDP estimator sends them, starting from first.
func settingsBurst(n int, first uint32) []byte {
	var b []byte
	for i := range n {
		b = h2test.AppendFrame(b, h2frame.TypeSettings, 0, 0, h2test.SettingsPayload(setting(h2frame.SettingInitialWindowSize, first+uint32(i)<<10)))
	}
	return b
}

// A SETTINGS flood (CVE-2019-9515) from a peer that reads nothing until
// its flood is written ends with GOAWAY ENHANCE_YOUR_CALM "settings_flood",
// and the GOAWAY reaches the peer: the engine stops writing ACKs long
// before they fill what the connection buffers. The pipe holds 4 KiB each
// way, less than the smallest send buffer Linux gives a TCP socket.
func TestWireSettingsFlood(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		pipe := wirePipe
		pipe.Capacity = 4 << 10
		st := newServerTest(t, h2conn.Config{}, wireOpts{pipe: pipe})
		st.greet()
		p := st.peer
		const n = 1000
		written := make(chan struct{})
		go func() {
			defer close(written)
			p.Conn.Write(settingsBurst(n, 1<<16)) // fails once the engine closes
		}()
		<-written
		acks := 0
		for {
			f, err := p.ReadFrame(5 * time.Second)
			if err != nil {
				t.Fatalf("want GOAWAY ENHANCE_YOUR_CALM after %d SETTINGS ACKs: %v", acks, err)
			}
			if f.Type == h2frame.TypeSettings && f.IsAck() {
				acks++
				continue
			}
			if f.Type != h2frame.TypeGoAway {
				t.Fatalf("want SETTINGS ACKs and a GOAWAY, got %v", f)
			}
			if f.ErrCode() != h2frame.ErrCodeEnhanceYourCalm || string(f.DebugData()) != "settings_flood" {
				t.Fatalf("GOAWAY %v %q; want ENHANCE_YOUR_CALM \"settings_flood\"", f.ErrCode(), f.DebugData())
			}
			break
		}
		if acks >= n {
			t.Errorf("%d SETTINGS acknowledged before the GOAWAY; want the flood cut short", acks)
		}
		p.WantClosed()
		var e *h2conn.Error
		if err := st.serveResult(); !errors.As(err, &e) || e.Code != h2frame.ErrCodeEnhanceYourCalm ||
			e.Reason != "settings_flood" || e.Initiator != h2conn.InitiatorEngine {
			t.Errorf("Serve returned %v; want the engine's ENHANCE_YOUR_CALM settings_flood", err)
		}
	})
}

// A peer that changes its settings now and then stays connected, however
// long it lives: 40 SETTINGS at once every 600 ms, faster than any
// legitimate peer (grpc-go's BDP estimator sends at most about 20 in a
// connection's life) and more in all than the limit per window allows.
func TestWireSettingsSpreadOut(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		const rounds, each = 5, 40
		for round := range rounds {
			for i := range each {
				p.WriteSettings(setting(h2frame.SettingInitialWindowSize, uint32(1<<16+(round*each+i)<<10)))
			}
			for range each {
				p.WantSettingsAck()
			}
			time.Sleep(600 * time.Millisecond)
		}
		st.stillUp()
	})
}

// The 2024 "CONTINUATION flood": endless empty CONTINUATION frames on one
// header block end with ENHANCE_YOUR_CALM, long before memory grows.
func TestWireContinuationFlood(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{MaxHeaderListSize: 1000}, wireOpts{})
		st.greet()
		p := st.peer
		block := h2test.EncodeHeaders(h2test.Fields(reqFields("/")...)...)
		burst := h2test.AppendFrame(nil, h2frame.TypeHeaders, h2frame.FlagEndStream, 1, block)
		for range 1000 {
			burst = h2test.AppendFrame(burst, h2frame.TypeContinuation, 0, 1, nil)
		}
		p.WriteBytes(burst)
		st.wantConnError(h2frame.ErrCodeEnhanceYourCalm)
		st.noStream()
	})
}

// A header block far above SETTINGS_MAX_HEADER_LIST_SIZE, sent as
// CONTINUATION frames, is refused without being buffered whole: the
// connection ends (or the stream is refused) and the handler never sees it.
func TestWireHugeHeaderBlock(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{MaxHeaderListSize: 1000}, wireOpts{})
		st.greet()
		p := st.peer
		big := make([]byte, 16384)
		for i := range big {
			big[i] = 'v'
		}
		block := h2test.EncodeHeaders(h2test.Fields(reqFields("/", "x-big", string(big)+string(big)+string(big)+string(big))...)...)
		p.WriteHeadersBlock(1, h2frame.FlagEndStream, block[:16384])
		for off := 16384; off < len(block); off += 16384 {
			end := min(off+16384, len(block))
			p.WriteContinuation(1, end == len(block), block[off:end])
			if p.WriteErr != nil {
				break
			}
		}
		for {
			f, err := p.ReadFrame(5 * time.Second)
			if err != nil {
				t.Fatalf("no answer to a 64 KiB header block: %v", err)
			}
			if f.Type == h2frame.TypeGoAway || (f.Type == h2frame.TypeRSTStream && f.StreamID == 1) {
				break
			}
			if f.Type == h2frame.TypeHeaders && f.StreamID == 1 {
				break // a 431 answer; its block need not be decoded here
			}
		}
		st.noStream()
	})
}

// RFC 9113 §5.1: WINDOW_UPDATE and PRIORITY are allowed on a half-closed
// (remote) stream, RST_STREAM closes it, and PRIORITY on an idle stream is
// allowed: none of them is an error.
func TestWireFramesAllowedOnHalfClosed(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, true, reqFields("/")...)
		s := st.stream()
		p.WriteWindowUpdate(1, 1000)
		p.WritePriority(1, h2frame.Priority{StreamDep: 0, Weight: 200})
		p.WritePriority(9, h2frame.Priority{StreamDep: 1, Weight: 3}) // idle stream
		p.WantNothing(quiet)
		p.WriteRST(1, h2frame.ErrCodeCancel)
		select {
		case <-s.Done():
		case <-time.After(time.Second):
			t.Fatalf("stream not done after RST_STREAM")
		}
		st.stillUp()
		// PRIORITY did not open stream 9 nor consume its id.
		p.WriteHeaders(9, true, reqFields("/")...)
		if s9 := st.stream(); s9.ID() != 9 {
			t.Fatalf("stream %d; want 9", s9.ID())
		}
	})
}

// RFC 9113 §6.2: HEADERS with padding and a priority block decode as the
// same request.
func TestWireHeadersPaddedWithPriority(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		block := h2test.EncodeHeaders(h2test.Fields(reqFields("/padded", "x-k", "v")...)...)
		payload := []byte{3}                         // pad length
		payload = append(payload, 0x80, 0, 0, 0, 15) // exclusive on 0, weight 16
		payload = append(payload, block...)          // the block
		payload = append(payload, 0, 0, 0)           // padding
		p.WriteRaw(h2frame.TypeHeaders, h2frame.FlagEndStream|h2frame.FlagEndHeaders|h2frame.FlagPadded|h2frame.FlagPriority, 1, payload)
		s := st.stream()
		if v, _ := h2test.Header(s.Headers(), ":path"); v != "/padded" {
			t.Fatalf("headers:\n%s", h2test.FormatFields(s.Headers()))
		}
		if v, _ := h2test.Header(s.Headers(), "x-k"); v != "v" {
			t.Fatalf("headers:\n%s", h2test.FormatFields(s.Headers()))
		}
	})
}

// A user GoAway sends GOAWAY with its code, the last stream processed and
// the debug data; with an error code the connection closes once the frame
// is out.
func TestWireUserGoAway(t *testing.T) {
	for _, code := range []h2frame.ErrCode{h2frame.ErrCodeNo, h2frame.ErrCodeInternal} {
		t.Run(code.String(), func(t *testing.T) {
			if code != h2frame.ErrCodeNo {
			}
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{})
				st.greet()
				p := st.peer
				p.WriteHeaders(1, true, reqFields("/")...)
				s := st.stream()
				st.conn.GoAway(code, "bye")
				g := p.WantGoAway(code)
				if string(g.DebugData()) != "bye" || g.LastStreamID() != 1 {
					t.Errorf("GOAWAY %v; want last stream 1, debug \"bye\"", g)
				}
				if code != h2frame.ErrCodeNo {
					p.WantClosed()
					return
				}
				if err := respond(st.pool, s, nil); err != nil {
					t.Fatalf("stream 1 after GOAWAY(NO_ERROR): %v", err)
				}
				p.WantHeaders(1)
				p.WantHeaders(1)
			})
		})
	}
}

// RFC 9113 §6.5.2: a server lowering MAX_CONCURRENT_STREAMS mid-connection
// makes the client queue new streams.
func TestWireClientMaxConcurrentLowered(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		ctx := context.Background()
		ct.open("/1", true)
		p.WriteSettings(setting(h2frame.SettingMaxConcurrentStreams, 1))
		p.WantSettingsAck()
		opened := make(chan *h2conn.Stream, 1)
		go func() {
			s, err := ct.conn.NewStream(ctx, h2test.Fields(reqFields("/3")...), h2conn.StreamOptions{EndStream: true})
			if err != nil {
				t.Errorf("queued NewStream: %v", err)
			}
			opened <- s
		}()
		p.WantNothing(quiet)
		p.WriteHeaders(1, true, ":status", "200")
		p.WantHeaders(3)
		if s := <-opened; s != nil {
			s.Release()
		}
	})
}

// RFC 9113 §5.1: DATA before the response HEADERS is malformed, and
// HEADERS on a stream the client never opened is a connection error.
func TestWireClientUnexpectedFrames(t *testing.T) {
	t.Run("DATA first", func(t *testing.T) {
		wireRun(t, func(t *testing.T) {
			ct := newClientTest(t, h2conn.Config{}, wireOpts{})
			p := ct.peer
			p.Greet()
			s := ct.open("/", true)
			p.WriteData(1, false, []byte("no headers"))
			f := p.WantOneOf(h2frame.TypeRSTStream, h2frame.TypeGoAway)
			if f.ErrCode() != h2frame.ErrCodeProtocol {
				t.Fatalf("got %v; want PROTOCOL_ERROR", f)
			}
			errc := make(chan error, 1)
			go func() { _, _, err := s.RecvHeaders(); errc <- err }()
			select {
			case err := <-errc:
				if err == nil {
					t.Fatalf("RecvHeaders succeeded")
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("RecvHeaders still waiting after the stream error")
			}
		})
	})
	t.Run("HEADERS on unopened stream", func(t *testing.T) {
		wireRun(t, func(t *testing.T) {
			ct := newClientTest(t, h2conn.Config{}, wireOpts{})
			p := ct.peer
			p.Greet()
			p.WriteHeaders(3, true, ":status", "200")
			p.WantGoAway(h2frame.ErrCodeProtocol)
			p.WantClosed()
		})
	})
	t.Run("HEADERS on even stream", func(t *testing.T) {
		wireRun(t, func(t *testing.T) {
			ct := newClientTest(t, h2conn.Config{}, wireOpts{})
			p := ct.peer
			p.Greet()
			p.WriteHeaders(2, true, ":status", "200")
			p.WantGoAway(h2frame.ErrCodeProtocol)
			p.WantClosed()
		})
	})
}
