package h2conn_test

// Wire-level tests of the server role: one test per RFC 9113 rule, the
// scripted peer playing the client.

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// TestWireHarnessEcho is the harness demo: the scripted client greets a
// server engine running a trivial echo handler, over every read chopping
// mode and a small write capacity.
func TestWireHarnessEcho(t *testing.T) {
	for _, pc := range []struct {
		name string
		cfg  h2test.PipeConfig
	}{
		{"whole", h2test.PipeConfig{}},
		{"chop1", h2test.PipeConfig{ChopReads: h2test.ChopOne, Capacity: 1 << 10}},
		{"random", h2test.PipeConfig{ChopReads: h2test.ChopRandom, Capacity: 4 << 10, Seed: 7}},
	} {
		t.Run(pc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				done := make(chan error, 1)
				var pool *bufpool.Pool
				st := newServerTest(t, h2conn.Config{}, wireOpts{pipe: pc.cfg, handler: func(s *h2conn.Stream) {
					echoHandler(pool, done)(s)
				}})
				pool = st.pool
				st.greet()
				p := st.peer
				p.WriteHeaders(1, false, reqFields("/echo")...)
				body := bytes.Repeat([]byte("leangrpc "), 4000) // 36 KB: three frames
				for off := 0; off < len(body); off += 16384 {
					end := min(off+16384, len(body))
					p.WriteData(1, end == len(body), body[off:end])
				}
				h := p.WantHeaders(1)
				if h.Get(":status") != "200" || h.EndStream {
					t.Fatalf("response headers:\n%s", h2test.FormatFields(h.Fields))
				}
				got, tr := p.WantBodyTrailers(1, true)
				if tr.Get("grpc-status") != "0" {
					t.Fatalf("trailers:\n%s", h2test.FormatFields(tr.Fields))
				}
				if !bytes.Equal(got, body) {
					t.Fatalf("echo: got %d bytes, want %d", len(got), len(body))
				}
				if err := <-done; err != nil {
					t.Fatalf("handler: %v", err)
				}
				st.stillUp()
			})
		})
	}
}

// RFC 9113 §3.4: the server's first frame is SETTINGS, it acknowledges
// ours, and it announces its connection window with WINDOW_UPDATE.
func TestWirePrefaceSettingsExchange(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		cfg := h2conn.Config{MaxConcurrentStreams: 7, InitialStreamWindow: 100000, InitialConnWindow: 1 << 20, MaxFrameSize: 1 << 15}
		st := newServerTest(t, cfg, wireOpts{})
		st.greet(setting(h2frame.SettingInitialWindowSize, 12345))
		p := st.peer
		for id, want := range map[h2frame.SettingID]uint32{
			h2frame.SettingMaxConcurrentStreams: 7,
			h2frame.SettingInitialWindowSize:    100000,
			h2frame.SettingMaxFrameSize:         1 << 15,
		} {
			if got, ok := p.RemoteSettings[id]; !ok || got != want {
				t.Errorf("server SETTINGS %#x = %d (sent %v); want %d", id, got, ok, want)
			}
		}
		if v, ok := p.RemoteSettings[h2frame.SettingEnablePush]; ok && v != 0 {
			t.Errorf("server advertised ENABLE_PUSH=%d", v)
		}
		p.WantNothing(quiet)
		if conn, _ := p.SendWindow(0); conn != 1<<20 {
			t.Errorf("connection window after the preface = %d; want %d (WINDOW_UPDATE on stream 0)", conn, 1<<20)
		}
		if got := st.conn.PeerSetting(h2frame.SettingInitialWindowSize); got != 12345 {
			t.Errorf("PeerSetting(INITIAL_WINDOW_SIZE) = %d; want 12345", got)
		}
	})
}

// RFC 9113 §3.4: a wrong preface is a connection error PROTOCOL_ERROR.
func TestWireBadPreface(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.peer.WriteBytes([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		st.peer.WantClosed()
		if err := st.serveResult(); err == nil {
			t.Errorf("Serve returned nil after a bad preface")
		}
	})
}

// RFC 9113 §6.5.3: without a SETTINGS ACK in time, SETTINGS_TIMEOUT.
func TestWireSettingsTimeout(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{SettingsTimeout: time.Second}, wireOpts{})
		p := st.peer
		delete(p.Ignore, h2frame.TypeSettings)
		p.WritePreface()
		p.WriteSettings()
		start := time.Now()
		p.WantSettings() // never acknowledged
		p.WantSettingsAck()
		st.wantConnError(h2frame.ErrCodeSettingsTimeout)
		if d := time.Since(start); d < time.Second-early() || d > time.Second+slack() {
			t.Errorf("GOAWAY after %v; want 1s", d)
		}
	})
}

// RFC 9113 §6.7: PING is answered with the same data; a PING ACK is not.
func TestWirePingAnswered(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{PingPermitWithoutStream: true, PingMinTime: -1}, wireOpts{})
		st.greet()
		p := st.peer
		delete(p.Ignore, h2frame.TypePing)
		d := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
		p.WritePing(d)
		p.WantPingAck(d)
		p.WritePingAck([8]byte{9})
		p.WantNothing(quiet)
	})
}

// RFC 9113 §6.7: PING with a length other than 8 is FRAME_SIZE_ERROR; PING
// on a stream is PROTOCOL_ERROR.
func TestWirePingMalformed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		id      uint32
		payload []byte
		code    h2frame.ErrCode
	}{
		{"short", 0, make([]byte, 7), h2frame.ErrCodeFrameSize},
		{"long", 0, make([]byte, 9), h2frame.ErrCodeFrameSize},
		{"stream", 1, make([]byte, 8), h2frame.ErrCodeProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{})
				st.greet()
				st.peer.WriteRaw(h2frame.TypePing, 0, tc.id, tc.payload)
				st.wantConnError(tc.code)
			})
		})
	}
}

// RFC 9113 §6.1, §6.2, §6.4, §6.10: DATA, HEADERS, RST_STREAM, PRIORITY and
// CONTINUATION on stream 0, and SETTINGS, PING and GOAWAY on a stream, are
// connection errors PROTOCOL_ERROR.
func TestWireFramesOnWrongStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     h2frame.Type
		flags   h2frame.Flags
		id      uint32
		payload []byte
	}{
		{"DATA on 0", h2frame.TypeData, 0, 0, []byte("x")},
		{"HEADERS on 0", h2frame.TypeHeaders, h2frame.FlagEndHeaders, 0, h2test.EncodeHeaders(h2test.Fields(reqFields("/")...)...)},
		{"RST_STREAM on 0", h2frame.TypeRSTStream, 0, 0, []byte{0, 0, 0, 8}},
		{"PRIORITY on 0", h2frame.TypePriority, 0, 0, []byte{0, 0, 0, 1, 16}},
		{"CONTINUATION on 0", h2frame.TypeContinuation, h2frame.FlagEndHeaders, 0, nil},
		{"SETTINGS on 1", h2frame.TypeSettings, 0, 1, nil},
		{"GOAWAY on 1", h2frame.TypeGoAway, 0, 1, make([]byte, 8)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{})
				st.greet()
				st.peer.WriteRaw(tc.typ, tc.flags, tc.id, tc.payload)
				st.wantConnError(h2frame.ErrCodeProtocol)
				st.noStream()
			})
		})
	}
}

// RFC 9113 §5.1.1: a client stream id must be odd and larger than every id
// it used before.
func TestWireStreamIDRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		ids  []uint32
	}{
		{"even", []uint32{2}},
		{"decreasing", []uint32{5, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{})
				st.greet()
				for _, id := range tc.ids {
					st.peer.WriteHeaders(id, true, reqFields("/")...)
				}
				st.wantConnError(h2frame.ErrCodeProtocol)
			})
		})
	}
}

// RFC 9113 §5.1 idle: DATA, RST_STREAM or WINDOW_UPDATE on an idle stream
// is a connection error PROTOCOL_ERROR.
func TestWireFramesOnIdleStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     h2frame.Type
		payload []byte
	}{
		{"DATA", h2frame.TypeData, []byte("x")},
		{"RST_STREAM", h2frame.TypeRSTStream, []byte{0, 0, 0, 8}},
		{"WINDOW_UPDATE", h2frame.TypeWindowUpdate, []byte{0, 0, 0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{})
				st.greet()
				st.peer.WriteRaw(tc.typ, 0, 1, tc.payload)
				st.wantConnError(h2frame.ErrCodeProtocol)
			})
		})
	}
}

// RFC 9113 §5.1 half-closed (remote): DATA after END_STREAM is a stream
// error STREAM_CLOSED.
func TestWireDataAfterEndStream(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, true, reqFields("/")...)
		s := st.stream()
		p.WriteData(1, false, []byte("late"))
		st.wantStreamOrConnError(1, h2frame.ErrCodeStreamClosed)
		select {
		case <-s.Done():
		case <-time.After(time.Second):
			t.Errorf("stream not done after the stream error")
		}
	})
}

// RFC 9113 §5.1 closed: DATA on a stream closed by RST_STREAM is a stream
// error STREAM_CLOSED (or ignored shortly after the reset).
func TestWireDataAfterPeerReset(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream()
		p.WriteRST(1, h2frame.ErrCodeCancel)
		p.WriteData(1, true, []byte("late"))
		// Either the DATA is ignored or it draws RST_STREAM STREAM_CLOSED;
		// the connection survives and the flow-control credit comes back.
		for {
			f, err := p.ReadFrame(time.Second)
			if err != nil {
				break
			}
			if f.Type == h2frame.TypeRSTStream && f.ErrCode() != h2frame.ErrCodeStreamClosed {
				t.Fatalf("got %v; want nothing or STREAM_CLOSED", f)
			}
			if f.Type == h2frame.TypeGoAway {
				t.Fatalf("got %v; the connection must survive", f)
			}
		}
		st.stillUp()
	})
}

// RFC 9113 §6.9.1: DATA beyond the stream window is FLOW_CONTROL_ERROR.
func TestWireDataBeyondStreamWindow(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: 100, DisableBDP: true}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream() // never read: the window stays closed
		p.WriteData(1, false, make([]byte, 60))
		p.WriteData(1, false, make([]byte, 41))
		st.wantStreamOrConnError(1, h2frame.ErrCodeFlowControl)
	})
}

// RFC 9113 §6.9.1: DATA beyond the connection window is a connection error
// FLOW_CONTROL_ERROR. The engine gives the connection window back on
// receipt, so only one frame larger than the whole window can overrun it.
func TestWireDataBeyondConnWindow(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		cfg := h2conn.Config{InitialStreamWindow: 1 << 20, InitialConnWindow: 65535, MaxFrameSize: 1 << 17, DisableBDP: true}
		st := newServerTest(t, cfg, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream() // never read
		if conn, stream := p.SendWindow(1); conn != 65535 || stream != 1<<20 {
			t.Fatalf("send windows conn %d stream %d; want 65535 and 1 MiB", conn, stream)
		}
		p.WriteData(1, false, make([]byte, 65536))
		st.wantConnError(h2frame.ErrCodeFlowControl)
	})
}

// RFC 9113 §6.9.1: a WINDOW_UPDATE taking a window above 2^31-1 is
// FLOW_CONTROL_ERROR, of the connection on stream 0, else of the stream.
func TestWireWindowUpdateOverflow(t *testing.T) {
	t.Run("connection", func(t *testing.T) {
		wireRun(t, func(t *testing.T) {
			st := newServerTest(t, h2conn.Config{}, wireOpts{})
			st.greet()
			st.peer.WriteWindowUpdate(0, 1<<31-1)
			st.wantConnError(h2frame.ErrCodeFlowControl)
		})
	})
	t.Run("stream", func(t *testing.T) {
		wireRun(t, func(t *testing.T) {
			st := newServerTest(t, h2conn.Config{}, wireOpts{})
			st.greet()
			p := st.peer
			p.WriteHeaders(1, false, reqFields("/")...)
			st.stream()
			p.WriteWindowUpdate(1, 1<<31-1)
			p.WantRST(1, h2frame.ErrCodeFlowControl)
			st.stillUp()
		})
	})
}

// RFC 9113 §6.9: a zero increment is PROTOCOL_ERROR, for the connection on
// stream 0, else for the stream.
func TestWireWindowUpdateZero(t *testing.T) {
	t.Run("connection", func(t *testing.T) {
		wireRun(t, func(t *testing.T) {
			st := newServerTest(t, h2conn.Config{}, wireOpts{})
			st.greet()
			st.peer.WriteWindowUpdate(0, 0)
			st.wantConnError(h2frame.ErrCodeProtocol)
		})
	})
	t.Run("stream", func(t *testing.T) {
		wireRun(t, func(t *testing.T) {
			st := newServerTest(t, h2conn.Config{}, wireOpts{})
			st.greet()
			p := st.peer
			p.WriteHeaders(1, false, reqFields("/")...)
			st.stream()
			p.WriteWindowUpdate(1, 0)
			p.WantRST(1, h2frame.ErrCodeProtocol)
			st.stillUp()
		})
	})
}

// RFC 9113 §6.9.2: a change of SETTINGS_INITIAL_WINDOW_SIZE resizes the
// send window of every open stream by the difference, down to negative.
func TestWireInitialWindowSizeChange(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		body := bytes.Repeat([]byte{'z'}, 10000)
		var pool *bufpool.Pool
		written := make(chan error, 1)
		st := newServerTest(t, h2conn.Config{}, wireOpts{handler: func(s *h2conn.Stream) {
			go func() {
				defer s.Release()
				if _, err := readAll(s); err != nil {
					written <- err
					return
				}
				written <- respond(pool, s, body)
			}()
		}})
		pool = st.pool
		st.greet(setting(h2frame.SettingInitialWindowSize, 1000))
		p := st.peer
		p.WriteWindowUpdate(0, 1<<20) // the connection window is not the limit
		p.WriteHeaders(1, true, reqFields("/")...)
		p.WantHeaders(1)
		got := recvData(t, p, 1, 1000)
		p.WantNothing(quiet)

		p.WriteSettings(setting(h2frame.SettingInitialWindowSize, 3000)) // +2000
		got += recvData(t, p, 1, 2000)
		p.WantNothing(quiet)

		p.WriteSettings(setting(h2frame.SettingInitialWindowSize, 500)) // window -2500
		p.WantSettingsAck()
		p.WriteWindowUpdate(1, 2600) // back to +100
		got += recvData(t, p, 1, 100)
		p.WantNothing(quiet)

		p.WriteWindowUpdate(1, 1<<20)
		got += recvData(t, p, 1, len(body)-got)
		if got != len(body) {
			t.Fatalf("received %d bytes; want %d", got, len(body))
		}
		if tr := p.WantHeaders(1); !tr.EndStream {
			t.Fatalf("trailers without END_STREAM")
		}
		if err := <-written; err != nil {
			t.Fatalf("handler: %v", err)
		}
	})
}

// recvData reads DATA frames on id until exactly n bytes came, failing if a
// frame would take it past n.
func recvData(t *testing.T, p *h2test.Peer, id uint32, n int) int {
	t.Helper()
	got := 0
	for got < n {
		f := p.WantData(id)
		got += int(f.Length)
		if got > n {
			t.Fatalf("DATA took the stream %d bytes past the %d-byte window", got-n, n)
		}
	}
	return got
}

// RFC 9113 §6.5.2: INITIAL_WINDOW_SIZE above 2^31-1 is a connection error
// FLOW_CONTROL_ERROR; MAX_FRAME_SIZE out of range and ENABLE_PUSH other
// than 0 or 1 are PROTOCOL_ERROR; a SETTINGS length not a multiple of 6 is
// FRAME_SIZE_ERROR, and so is an ACK with a payload.
func TestWireSettingsValues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   h2frame.Flags
		payload []byte
		code    h2frame.ErrCode
	}{
		{"window", 0, h2test.SettingsPayload(setting(h2frame.SettingInitialWindowSize, 1<<31)), h2frame.ErrCodeFlowControl},
		{"frame size low", 0, h2test.SettingsPayload(setting(h2frame.SettingMaxFrameSize, 16383)), h2frame.ErrCodeProtocol},
		{"frame size high", 0, h2test.SettingsPayload(setting(h2frame.SettingMaxFrameSize, 1<<24)), h2frame.ErrCodeProtocol},
		{"enable push", 0, h2test.SettingsPayload(setting(h2frame.SettingEnablePush, 2)), h2frame.ErrCodeProtocol},
		{"length", 0, make([]byte, 7), h2frame.ErrCodeFrameSize},
		{"ack payload", h2frame.FlagAck, make([]byte, 6), h2frame.ErrCodeFrameSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{})
				st.greet()
				st.peer.WriteRaw(h2frame.TypeSettings, tc.flags, 0, tc.payload)
				st.wantConnError(tc.code)
			})
		})
	}
}

// RFC 9113 §5.1.2: streams beyond SETTINGS_MAX_CONCURRENT_STREAMS are
// refused with REFUSED_STREAM (retryable, as gRPC needs), and a slot frees
// when a stream closes.
func TestWireMaxConcurrentStreams(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{MaxConcurrentStreams: 2}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, true, reqFields("/")...)
		p.WriteHeaders(3, true, reqFields("/")...)
		s1, _ := st.stream(), st.stream()
		p.WriteHeaders(5, true, reqFields("/")...)
		p.WantRST(5, h2frame.ErrCodeRefusedStream)
		st.noStream()
		if err := respond(st.pool, s1, nil); err != nil {
			t.Fatalf("respond: %v", err)
		}
		p.WantHeaders(1)
		p.WantHeaders(1)
		eventually(t, "stream 1 closed", func() bool { return st.conn.NumActiveStreams() == 1 })
		p.WriteHeaders(7, true, reqFields("/")...)
		if s := st.stream(); s.ID() != 7 {
			t.Fatalf("stream %d reached the handler; want 7", s.ID())
		}
	})
}

// RFC 9113 §6.5.2, §10.5.1: a header list above our
// SETTINGS_MAX_HEADER_LIST_SIZE is refused (431 or RST_STREAM), without
// reaching the handler and without ending the connection.
func TestWireHeaderListTooLarge(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{MaxHeaderListSize: 1000}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, true, reqFields("/", "x-big", string(bytes.Repeat([]byte{'b'}, 2000)))...)
		f, err := p.ReadFrame(5 * time.Second)
		for err == nil && (f.Type == h2frame.TypeWindowUpdate || f.Type == h2frame.TypeSettings) {
			f, err = p.ReadFrame(5 * time.Second)
		}
		switch {
		case err != nil:
			t.Fatalf("no answer to an oversize header list: %v", err)
		case f.Type == h2frame.TypeRSTStream && f.StreamID == 1:
		case f.Type == h2frame.TypeHeaders && f.StreamID == 1:
			fs, derr := p.Decoder.DecodeBlock(f.BlockFragment())
			if v, _ := h2test.Header(fs, ":status"); derr != nil || v != "431" {
				t.Fatalf("answer %v with %v, %v; want :status 431", f, fs, derr)
			}
		default:
			t.Fatalf("got %v; want RST_STREAM or a 431 response on stream 1", f)
		}
		st.noStream()
		st.stillUp()
	})
}

// RFC 9113 §8.3.1, §8.2.1, §8.2.2: malformed requests are stream errors
// PROTOCOL_ERROR and never reach the handler.
func TestWireMalformedRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   []string
	}{
		{"no method", []string{":scheme", "http", ":path", "/", ":authority", "a"}},
		{"no path", []string{":method", "POST", ":scheme", "http", ":authority", "a"}},
		{"no scheme", []string{":method", "POST", ":path", "/", ":authority", "a"}},
		{"empty path", []string{":method", "POST", ":scheme", "http", ":path", "", ":authority", "a"}},
		{"unknown pseudo", reqFields("/", ":foo", "bar")},
		{"response pseudo", reqFields("/", ":status", "200")},
		{"repeated pseudo", append([]string{":method", "GET"}, reqFields("/")...)},
		{"pseudo after regular", append([]string{"x-a", "b"}, reqFields("/")...)},
		{"uppercase name", reqFields("/", "X-Upper", "v")},
		{"connection header", reqFields("/", "connection", "keep-alive")},
		{"te not trailers", reqFields("/", "te", "gzip")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{})
				st.greet()
				st.peer.WriteHeaders(1, true, tc.kv...)
				st.peer.WantRST(1, h2frame.ErrCodeProtocol)
				st.noStream()
				st.stillUp()
			})
		})
	}
}

// RFC 9113 §8.1.1: DATA whose total differs from content-length is a
// stream error PROTOCOL_ERROR.
func TestWireContentLengthMismatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []int
	}{
		{"short", []int{5}},
		{"long", []int{8, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{handler: func(s *h2conn.Stream) {
					go func() { readAll(s); s.Release() }()
				}})
				st.greet()
				p := st.peer
				p.WriteHeaders(1, false, reqFields("/", "content-length", "10")...)
				for i, n := range tc.chunks {
					p.WriteData(1, i == len(tc.chunks)-1, make([]byte, n))
				}
				p.WantRST(1, h2frame.ErrCodeProtocol)
				st.stillUp()
			})
		})
	}
}

// RFC 9113 §6.10: a header block must continue with CONTINUATION frames
// on the same stream and nothing else in between; CONTINUATION without an
// open block is a connection error PROTOCOL_ERROR too.
func TestWireContinuationRules(t *testing.T) {
	block := h2test.EncodeHeaders(h2test.Fields(reqFields("/")...)...)
	for _, tc := range []struct {
		name  string
		write func(p *h2test.Peer)
	}{
		{"interleaved PING", func(p *h2test.Peer) {
			p.WriteHeadersBlock(1, h2frame.FlagEndStream, block[:4])
			p.WritePing([8]byte{})
			p.WriteContinuation(1, true, block[4:])
		}},
		{"interleaved HEADERS", func(p *h2test.Peer) {
			p.WriteHeadersBlock(1, h2frame.FlagEndStream, block[:4])
			p.WriteHeadersBlock(3, h2frame.FlagEndStream|h2frame.FlagEndHeaders, block)
		}},
		{"other stream", func(p *h2test.Peer) {
			p.WriteHeadersBlock(1, h2frame.FlagEndStream, block[:4])
			p.WriteContinuation(3, true, block[4:])
		}},
		{"no block", func(p *h2test.Peer) {
			p.WriteContinuation(1, true, block)
		}},
		{"after end", func(p *h2test.Peer) {
			p.WriteHeadersBlock(1, h2frame.FlagEndStream|h2frame.FlagEndHeaders, block)
			p.WriteContinuation(1, true, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{})
				st.greet()
				tc.write(st.peer)
				st.wantConnError(h2frame.ErrCodeProtocol)
			})
		})
	}
}

// A header block split into many CONTINUATION frames is reassembled.
func TestWireContinuationReassembly(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		block := h2test.EncodeHeaders(h2test.Fields(reqFields("/split", "x-k", "v")...)...)
		p.WriteHeadersBlock(1, h2frame.FlagEndStream, block[:1])
		for i := 1; i < len(block); i++ {
			p.WriteContinuation(1, i == len(block)-1, block[i:i+1])
		}
		s := st.stream()
		if v, _ := h2test.Header(s.Headers(), ":path"); v != "/split" {
			t.Fatalf("headers:\n%s", h2test.FormatFields(s.Headers()))
		}
		// grpc-go's stats count the HEADERS frame's payload only.
		if got := s.HeadersWireLength(); got != 1 {
			t.Errorf("HeadersWireLength = %d after a 1-byte HEADERS and CONTINUATIONs, want 1", got)
		}
	})
}

// RFC 9113 §6.4: RST_STREAM from the peer ends the stream for the handler
// with the code and the peer as initiator, and draws no frame in reply.
func TestWireRSTStreamFromPeer(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		p.WriteRST(1, h2frame.ErrCodeCancel)
		_, err := s.Recv()
		wantH2Error(t, err, h2frame.ErrCodeCancel, h2conn.InitiatorPeer)
		if err := s.Send(h2conn.HeadersItem(h2test.Fields(":status", "200"), true)); err == nil {
			t.Errorf("WriteHeaders on a reset stream succeeded")
		}
		p.WantNothing(quiet)
		st.stillUp()
	})
}

// RFC 9113 §6.4: RST_STREAM with a length other than 4 is a connection
// error FRAME_SIZE_ERROR.
func TestWireRSTStreamBadLength(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream()
		p.WriteRaw(h2frame.TypeRSTStream, 0, 1, []byte{0, 0, 8})
		st.wantConnError(h2frame.ErrCodeFrameSize)
	})
}

// A handler's Reset sends RST_STREAM with its code.
func TestWireResetByHandler(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		s.Reset(h2frame.ErrCodeInternal)
		p.WantRST(1, h2frame.ErrCodeInternal)
		if _, err := s.Recv(); err == nil {
			t.Fatalf("Recv after Reset succeeded")
		}
		st.stillUp()
	})
}

// RFC 9113 §5.1: request trailers the client sent before the server's
// RST_STREAM reached it are ignored, not a connection error, whether the
// handler reset the stream or answered before the request ended.
func TestWireTrailersAfterServerReset(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		s.Reset(h2frame.ErrCodeInternal)
		p.WantRST(1, h2frame.ErrCodeInternal)
		p.WriteHeaders(1, true, "grpc-status", "0")

		p.WriteHeaders(3, false, reqFields("/")...)
		s = st.stream()
		if err := respond(st.pool, s, []byte("early")); err != nil {
			t.Fatal(err)
		}
		p.WantHeaders(3)
		p.WantData(3)
		p.WantHeaders(3)
		p.WantRST(3, h2frame.ErrCodeNo)
		p.WriteHeaders(3, true, "grpc-status", "0")
		st.stillUp()
	})
}

// RFC 9113 §6.8: a graceful shutdown sends GOAWAY(2^31-1) and a PING, then
// GOAWAY with the last stream processed; streams open finish, newer ones
// are refused, and the connection closes once idle.
func TestWireGoAwayGraceful(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, true, reqFields("/")...)
		s1 := st.stream()
		st.conn.GracefulShutdown()
		g1 := p.WantGoAway(h2frame.ErrCodeNo) // the PING in between is answered by the peer
		if g1.LastStreamID() != 1<<31-1 {
			t.Errorf("first GOAWAY last stream %d; want 2^31-1", g1.LastStreamID())
		}
		g2 := p.WantGoAway(h2frame.ErrCodeNo)
		if g2.LastStreamID() != 1 {
			t.Errorf("second GOAWAY last stream %d; want 1", g2.LastStreamID())
		}
		p.WriteHeaders(3, true, reqFields("/")...)
		p.WantRST(3, h2frame.ErrCodeRefusedStream)
		st.noStream()
		if err := respond(st.pool, s1, []byte("bye")); err != nil {
			t.Fatalf("in-flight stream after GOAWAY: %v", err)
		}
		if h := p.WantHeaders(1); h.Get(":status") != "200" {
			t.Fatalf("response %v", h.Fields)
		}
		if got := p.WantData(1).Data(); string(got) != "bye" {
			t.Fatalf("body %q", got)
		}
		p.WantHeaders(1)
		p.WantClosed()
		if err := st.serveResult(); err != nil {
			t.Errorf("Serve after a graceful shutdown: %v; want nil", err)
		}
	})
}

// RFC 9113 §6.8: after the client's GOAWAY the server finishes the streams
// open and closes.
func TestWireGoAwayFromClient(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, true, reqFields("/")...)
		s1 := st.stream()
		p.WriteGoAway(0, h2frame.ErrCodeNo, "")
		select {
		case <-st.conn.GoingAway():
		case <-time.After(time.Second):
			t.Fatalf("GoingAway not closed after the peer's GOAWAY")
		}
		if err := respond(st.pool, s1, nil); err != nil {
			t.Fatalf("in-flight stream after the peer's GOAWAY: %v", err)
		}
		p.WantHeaders(1)
		p.WantHeaders(1)
	})
}

// RFC 9113 §5.4.1: a connection error sends GOAWAY with the code and the
// last stream processed, then closes; open streams fail.
func TestWireConnErrorGoAwayThenClose(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		p.WriteWindowUpdate(0, 0)
		g := p.WantGoAway(h2frame.ErrCodeProtocol)
		if g.LastStreamID() != 1 {
			t.Errorf("GOAWAY last stream %d; want 1", g.LastStreamID())
		}
		p.WantClosed()
		if _, err := s.Recv(); err == nil || !errors.Is(err, h2conn.ErrConnClosed) {
			t.Errorf("Recv on a stream of a failed connection: %v; want an error matching ErrConnClosed", err)
		}
		var e *h2conn.Error
		if err := st.serveResult(); !errors.As(err, &e) || e.Code != h2frame.ErrCodeProtocol {
			t.Errorf("Serve returned %v", err)
		}
	})
}

// grpc-go's keepalive enforcement: pings without streams, when not
// permitted, earn strikes, and too many get GOAWAY ENHANCE_YOUR_CALM
// "too_many_pings".
func TestWireKeepaliveTooManyPings(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{PingMinTime: time.Minute}, wireOpts{})
		st.greet()
		p := st.peer
		delete(p.Ignore, h2frame.TypePing)
		for i := 0; ; i++ {
			if i == 10 {
				t.Fatalf("10 pings within a second earned no GOAWAY")
			}
			p.WritePing([8]byte{byte(i)})
			f := p.WantOneOf(h2frame.TypePing, h2frame.TypeGoAway)
			if f.Type == h2frame.TypeGoAway {
				if f.ErrCode() != h2frame.ErrCodeEnhanceYourCalm || string(f.DebugData()) != "too_many_pings" {
					t.Fatalf("got %v; want GOAWAY ENHANCE_YOUR_CALM too_many_pings", f)
				}
				if i < 2 {
					t.Fatalf("GOAWAY after %d pings; grpc-go allows 2 strikes", i+1)
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		p.WantClosed()
	})
}

// Pings spaced by more than PingMinTime while a stream is open are fine.
func TestWireKeepalivePolitePings(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{PingMinTime: 100 * time.Millisecond}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream()
		for i := range 5 {
			time.Sleep(250 * time.Millisecond)
			d := [8]byte{byte(i), 'k'}
			p.WritePing(d)
			p.WantPingAck(d)
		}
		p.WantNothing(quiet)
	})
}

// Received DATA is credited back with WINDOW_UPDATE on the stream and the
// connection once the handler consumed it, so the sender never stalls.
func TestWireWindowUpdateAfterConsumption(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		consumed := make(chan int, 64)
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: 65535, InitialConnWindow: 65535, DisableBDP: true}, wireOpts{handler: func(s *h2conn.Stream) {
			go func() {
				defer s.Release()
				for {
					b, err := s.Recv()
					if err != nil {
						close(consumed)
						return
					}
					consumed <- b.Len()
					b.Free() // Recv returned an owned buffer
				}
			}()
		}})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		// Send four full windows: without credit the peer would stall
		// after the first.
		const total = 4 * 65535
		sendWithCredit(t, p, 1, total, false)
		p.WriteData(1, true, nil)
		got := 0
		for n := range consumed {
			got += n
		}
		if got != total {
			t.Fatalf("handler consumed %d bytes; want %d", got, total)
		}
	})
}

// A large response to a peer that grants window in small steps arrives
// whole, and never exceeds the windows or the max frame size.
func TestWireLargeTransferSlowWindow(t *testing.T) {
	for _, pc := range []h2test.PipeConfig{
		{},
		{ChopReads: h2test.ChopRandom, Capacity: 3000, Seed: 11},
	} {
		t.Run("", func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				body := make([]byte, 1<<20)
				for i := range body {
					body[i] = byte(i * 7)
				}
				var pool *bufpool.Pool
				errc := make(chan error, 1)
				st := newServerTest(t, h2conn.Config{}, wireOpts{pipe: pc, handler: func(s *h2conn.Stream) {
					go func() {
						defer s.Release()
						readAll(s)
						errc <- respond(pool, s, body)
					}()
				}})
				pool = st.pool
				const step = 4096
				st.greet(setting(h2frame.SettingInitialWindowSize, step))
				p := st.peer
				p.WriteHeaders(1, true, reqFields("/big")...)
				p.WantHeaders(1)
				connWin, streamWin := int64(65535), int64(step)
				var got []byte
				for len(got) < len(body) {
					f := p.WantData(1)
					if f.Length > h2frame.MinMaxFrameSize {
						t.Fatalf("DATA of %d bytes above the 16 KiB max frame size", f.Length)
					}
					connWin -= int64(f.Length)
					streamWin -= int64(f.Length)
					if connWin < 0 || streamWin < 0 {
						t.Fatalf("engine overran the windows: conn %d stream %d", connWin, streamWin)
					}
					got = append(got, f.Data()...)
					if streamWin < step/4 {
						p.WriteWindowUpdate(1, uint32(step-streamWin))
						streamWin = step
					}
					if connWin < step {
						p.WriteWindowUpdate(0, step)
						connWin += step
					}
				}
				if !bytes.Equal(got, body) {
					t.Fatalf("received %d bytes, not the body", len(got))
				}
				if tr := p.WantHeaders(1); !tr.EndStream || tr.Get("grpc-status") != "0" {
					t.Fatalf("trailers %v", tr.Fields)
				}
				if err := <-errc; err != nil {
					t.Fatalf("handler: %v", err)
				}
			})
		})
	}
}

// RFC 9113 §4.2: a frame above our SETTINGS_MAX_FRAME_SIZE is a
// FRAME_SIZE_ERROR.
func TestWireFrameTooLarge(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream()
		p.WriteData(1, false, make([]byte, h2frame.MinMaxFrameSize+1))
		st.wantStreamOrConnError(1, h2frame.ErrCodeFrameSize)
	})
}

// RFC 9113 §5.5: frames of unknown type are ignored, even inside nothing.
func TestWireUnknownFrameIgnored(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		st.peer.WriteRaw(0x42, 0xff, 0, []byte("whatever"))
		st.peer.WriteRaw(0x42, 0, 7, nil)
		st.stillUp()
	})
}

// RFC 9113 §8.4: a client cannot push; PUSH_PROMISE to a server is a
// connection error PROTOCOL_ERROR.
func TestWirePushPromiseToServer(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		st.stream()
		p.WriteRaw(h2frame.TypePushPromise, h2frame.FlagEndHeaders, 1, append([]byte{0, 0, 0, 2}, h2test.EncodeHeaders(h2test.Fields(reqFields("/")...)...)...))
		st.wantConnError(h2frame.ErrCodeProtocol)
	})
}

// RFC 9113 §5.3.1: a stream depending on itself is a stream error
// PROTOCOL_ERROR.
func TestWirePrioritySelfDependency(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		st.peer.WritePriority(1, h2frame.Priority{StreamDep: 1, Weight: 16})
		st.peer.WantRST(1, h2frame.ErrCodeProtocol)
		st.stillUp()
	})
}

// RFC 9113 §6.8: a GOAWAY from the client (whatever its code, §7: unknown
// codes are not special) does not stop the server from answering what the
// client sends next, here a PING sent right behind it (h2spec http2/7/1).
func TestWireGoAwayFromClientThenPing(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		goaway := h2test.AppendFrame(nil, h2frame.TypeGoAway, 0, 0, []byte{0, 0, 0, 0, 0, 0, 0, 0xff})
		p.WriteBytes(h2test.AppendFrame(goaway, h2frame.TypePing, 0, 0, []byte("h2spec\x00\x00")))
		p.WantPingAck([8]byte{'h', '2', 's', 'p', 'e', 'c'})
	})
}

// RFC 9113 §6.10: a response header block larger than the peer's max frame
// size goes out as HEADERS plus CONTINUATION frames and decodes whole.
func TestWireLargeResponseHeaders(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, true, reqFields("/")...)
		s := st.stream()
		big := strings.Repeat("abcdefghij", 4000) // 40 KB
		if err := s.Send(h2conn.HeadersItem(h2test.Fields(":status", "200", "x-big", big), true)); err != nil {
			t.Fatal(err)
		}
		h := p.WantHeaders(1) // fails unless CONTINUATIONs follow at once
		if h.Get("x-big") != big || !h.EndStream {
			t.Fatalf("x-big came back with %d bytes (end %v); want %d", len(h.Get("x-big")), h.EndStream, len(big))
		}
	})
}

// A server connection that raises SETTINGS_MAX_FRAME_SIZE from the handler
// (as the root package does on a connection's first gRPC request) sends a
// SETTINGS frame with the new value and accepts larger DATA frames from
// then on; raising to a value not above the current one sends nothing.
func TestWireRaiseMaxFrameSize(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		streams := make(chan *h2conn.Stream, 2)
		st := newServerTest(t, h2conn.Config{}, wireOpts{handler: func(s *h2conn.Stream) {
			s.Conn().RaiseMaxFrameSize(256 << 10)
			s.Conn().RaiseMaxFrameSize(64 << 10) // not above: nothing
			streams <- s
		}})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		var raised int
		for raised == 0 {
			f, err := p.ReadFrame(5 * time.Second)
			if err != nil {
				t.Fatalf("no SETTINGS raising the frame size: %v", err)
			}
			if f.Type != h2frame.TypeSettings || f.IsAck() {
				continue
			}
			for _, s := range f.Settings() {
				if s.ID == h2frame.SettingMaxFrameSize {
					if s.Val != 256<<10 {
						t.Fatalf("SETTINGS_MAX_FRAME_SIZE %d, want %d", s.Val, 256<<10)
					}
					raised++
				}
			}
		}
		p.WriteSettingsAck()
		s := <-streams
		data := bytes.Repeat([]byte("0123456789abcdef"), 40<<10/16) // 40 KiB: one frame above 16 KiB
		p.WriteData(1, true, data)
		var got []byte
		for {
			b, err := s.Recv()
			if err != nil {
				break
			}
			got = append(got, b.Bytes()...)
			b.Free()
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("received %d bytes, want the %d sent in one frame", len(got), len(data))
		}
		if err := respond(st.pool, s, nil); err != nil {
			t.Fatalf("respond: %v", err)
		}
		for {
			f, err := p.ReadFrame(200 * time.Millisecond)
			if err != nil {
				break
			}
			if f.Type == h2frame.TypeSettings && !f.IsAck() {
				t.Fatalf("a second SETTINGS %v after raising to a smaller value", f.Settings())
			}
		}
	})
}

// A client that stops before its preface and first SETTINGS are complete
// (slowloris) is closed once PrefaceTimeout has passed; one that greets in
// time is not.
func TestWirePrefaceTimeout(t *testing.T) {
	settings := h2test.AppendFrame(nil, h2frame.TypeSettings, 0, 0, nil)
	for name, sent := range map[string]string{
		"nothing":       "",
		"half-preface":  h2test.ClientPreface[:10],
		"half-settings": h2test.ClientPreface + string(settings[:5]),
		"preface-only":  h2test.ClientPreface,
	} {
		t.Run(name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{PrefaceTimeout: time.Second, SettingsTimeout: -1}, wireOpts{})
				start := time.Now()
				if sent != "" {
					st.peer.WriteBytes([]byte(sent))
				}
				// Not acknowledged: an ACK would be a frame of ours.
				delete(st.peer.Ignore, h2frame.TypeSettings)
				st.peer.WantSettings()
				e := st.wantConnError(h2frame.ErrCodeProtocol)
				if e != nil && e.Reason != "preface_timeout" {
					t.Errorf("reason %q, want preface_timeout", e.Reason)
				}
				if d := time.Since(start); d < time.Second-early() || d > time.Second+slack() {
					t.Errorf("closed after %v; want 1s", d)
				}
			})
		})
	}
	t.Run("greeted", func(t *testing.T) {
		wireRun(t, func(t *testing.T) {
			st := newServerTest(t, h2conn.Config{PrefaceTimeout: time.Second}, wireOpts{})
			st.greet()
			time.Sleep(time.Second + early())
			st.stillUp()
		})
	})
}
