package h2frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func settingBytes(id SettingID, v uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, uint16(id)), v)
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// ruleCase is one encoding and what ReadFrame must make of it: a frame of
// type want, or an error of kind conn/stream with code.
type ruleCase struct {
	name   string
	wire   []byte
	want   Type // expected frame type when ok
	ok     bool
	stream bool // StreamError rather than ConnError
	code   ErrCode
	reason string // expected Reason when non-empty
	cfg    ReaderConfig
}

func okCase(name string, want Type, wire []byte) ruleCase {
	return ruleCase{name: name, wire: wire, want: want, ok: true}
}

func connCase(name string, code ErrCode, wire []byte) ruleCase {
	return ruleCase{name: name, wire: wire, code: code}
}

func streamCase(name string, code ErrCode, wire []byte) ruleCase {
	return ruleCase{name: name, wire: wire, code: code, stream: true}
}

var (
	endH     = FlagEndHeaders
	pingWire = frameBytes(TypePing, 0, 0, make([]byte, 8))
)

func ruleCases() []ruleCase {
	cs := []ruleCase{
		// Frame size.
		connCase("frame_too_large", ErrCodeFrameSize, frameBytes(TypeData, 0, 1, make([]byte, MinMaxFrameSize+1))),
		connCase("unknown_too_large", ErrCodeFrameSize, frameBytes(0x30, 0, 1, make([]byte, MinMaxFrameSize+1))),
		okCase("max_size_data", TypeData, frameBytes(TypeData, 0, 1, make([]byte, MinMaxFrameSize))),
		{name: "larger_max_frame", wire: frameBytes(TypePing, 0, 0, make([]byte, 8)), want: TypePing, ok: true, cfg: ReaderConfig{MaxFrameSize: 1 << 20}},
		{name: "big_goaway_past_read_buffer", wire: frameBytes(TypeGoAway, 0, 0, make([]byte, 40000)), want: TypeGoAway, ok: true, cfg: ReaderConfig{MaxFrameSize: 1 << 20}},

		// DATA (§6.1).
		connCase("data_stream_0", ErrCodeProtocol, frameBytes(TypeData, 0, 0, []byte("x"))),
		connCase("data_padded_empty", ErrCodeFrameSize, frameBytes(TypeData, FlagPadded, 1, nil)),
		connCase("data_pad_eq_len", ErrCodeProtocol, frameBytes(TypeData, FlagPadded, 1, []byte{3, 0, 0})),
		connCase("data_pad_over_len", ErrCodeProtocol, frameBytes(TypeData, FlagPadded, 1, []byte{200, 0})),
		okCase("data_pad_all", TypeData, frameBytes(TypeData, FlagPadded, 1, []byte{2, 0, 0})),
		okCase("data_empty", TypeData, frameBytes(TypeData, FlagEndStream, 1, nil)),
		connCase("data_big_pad_over_len", ErrCodeProtocol, frameBytes(TypeData, FlagPadded, 1, append([]byte{255}, make([]byte, 100)...))),

		// HEADERS (§6.2), empty header blocks.
		connCase("headers_stream_0", ErrCodeProtocol, frameBytes(TypeHeaders, endH, 0, nil)),
		connCase("headers_padded_empty", ErrCodeFrameSize, frameBytes(TypeHeaders, endH|FlagPadded, 1, nil)),
		connCase("headers_priority_short", ErrCodeFrameSize, frameBytes(TypeHeaders, endH|FlagPriority, 1, []byte{0, 0, 0})),
		connCase("headers_pad_too_long", ErrCodeProtocol, frameBytes(TypeHeaders, endH|FlagPadded, 1, []byte{2, 0})),
		okCase("headers_pad_exact", TypeHeaders, frameBytes(TypeHeaders, endH|FlagPadded, 1, []byte{2, 0, 0})),
		streamCase("headers_self_dependency", ErrCodeProtocol, frameBytes(TypeHeaders, endH|FlagPriority, 3, cat(u32(3), []byte{16}))),
		okCase("headers_priority", TypeHeaders, frameBytes(TypeHeaders, endH|FlagPriority, 3, cat(u32(1<<31|1), []byte{16}))),
		connCase("headers_bad_hpack", ErrCodeCompression, frameBytes(TypeHeaders, endH, 1, []byte{0xff, 0xff, 0xff, 0xff, 0x0f})),

		// PRIORITY (§6.3).
		connCase("priority_stream_0", ErrCodeProtocol, frameBytes(TypePriority, 0, 0, make([]byte, 5))),
		streamCase("priority_len_4", ErrCodeFrameSize, frameBytes(TypePriority, 0, 1, make([]byte, 4))),
		streamCase("priority_len_6", ErrCodeFrameSize, frameBytes(TypePriority, 0, 1, make([]byte, 6))),
		streamCase("priority_self", ErrCodeProtocol, frameBytes(TypePriority, 0, 5, cat(u32(5), []byte{1}))),

		// RST_STREAM (§6.4).
		connCase("rst_stream_0", ErrCodeProtocol, frameBytes(TypeRSTStream, 0, 0, u32(8))),
		connCase("rst_len_3", ErrCodeFrameSize, frameBytes(TypeRSTStream, 0, 1, make([]byte, 3))),
		connCase("rst_len_5", ErrCodeFrameSize, frameBytes(TypeRSTStream, 0, 1, make([]byte, 5))),

		// SETTINGS (§6.5).
		connCase("settings_stream_1", ErrCodeProtocol, frameBytes(TypeSettings, 0, 1, nil)),
		connCase("settings_len_5", ErrCodeFrameSize, frameBytes(TypeSettings, 0, 0, make([]byte, 5))),
		connCase("settings_ack_payload", ErrCodeFrameSize, frameBytes(TypeSettings, FlagAck, 0, settingBytes(1, 1))),
		connCase("settings_push_2", ErrCodeProtocol, frameBytes(TypeSettings, 0, 0, settingBytes(SettingEnablePush, 2))),
		okCase("settings_push_1", TypeSettings, frameBytes(TypeSettings, 0, 0, settingBytes(SettingEnablePush, 1))),
		connCase("settings_window_2^31", ErrCodeFlowControl, frameBytes(TypeSettings, 0, 0, settingBytes(SettingInitialWindowSize, 1<<31))),
		okCase("settings_window_max", TypeSettings, frameBytes(TypeSettings, 0, 0, settingBytes(SettingInitialWindowSize, 1<<31-1))),
		connCase("settings_frame_size_low", ErrCodeProtocol, frameBytes(TypeSettings, 0, 0, settingBytes(SettingMaxFrameSize, 1<<14-1))),
		connCase("settings_frame_size_high", ErrCodeProtocol, frameBytes(TypeSettings, 0, 0, settingBytes(SettingMaxFrameSize, 1<<24))),
		okCase("settings_frame_size_edges", TypeSettings, frameBytes(TypeSettings, 0, 0, cat(settingBytes(SettingMaxFrameSize, 1<<14), settingBytes(SettingMaxFrameSize, 1<<24-1)))),
		okCase("settings_unknown_id", TypeSettings, frameBytes(TypeSettings, 0, 0, settingBytes(0xabcd, 1<<31))),
		connCase("settings_too_many", ErrCodeEnhanceYourCalm, frameBytes(TypeSettings, 0, 0, bytes.Repeat(settingBytes(1, 4096), MaxSettingsPerFrame+1))),

		// PUSH_PROMISE (§6.6).
		connCase("push_stream_0", ErrCodeProtocol, frameBytes(TypePushPromise, endH, 0, u32(2))),
		connCase("push_short", ErrCodeFrameSize, frameBytes(TypePushPromise, endH, 1, []byte{0, 0, 2})),
		connCase("push_pad_too_long", ErrCodeProtocol, frameBytes(TypePushPromise, endH|FlagPadded, 1, cat([]byte{1}, u32(2)))),
		okCase("push_promise", TypePushPromise, frameBytes(TypePushPromise, endH, 1, u32(2))),

		// PING (§6.7).
		connCase("ping_stream_1", ErrCodeProtocol, frameBytes(TypePing, 0, 1, make([]byte, 8))),
		connCase("ping_len_7", ErrCodeFrameSize, frameBytes(TypePing, 0, 0, make([]byte, 7))),
		connCase("ping_len_9", ErrCodeFrameSize, frameBytes(TypePing, 0, 0, make([]byte, 9))),

		// GOAWAY (§6.8).
		connCase("goaway_stream_1", ErrCodeProtocol, frameBytes(TypeGoAway, 0, 1, make([]byte, 8))),
		connCase("goaway_len_7", ErrCodeFrameSize, frameBytes(TypeGoAway, 0, 0, make([]byte, 7))),

		// WINDOW_UPDATE (§6.9).
		connCase("wu_len_3", ErrCodeFrameSize, frameBytes(TypeWindowUpdate, 0, 0, make([]byte, 3))),
		connCase("wu_len_5", ErrCodeFrameSize, frameBytes(TypeWindowUpdate, 0, 1, make([]byte, 5))),
		connCase("wu_zero_conn", ErrCodeProtocol, frameBytes(TypeWindowUpdate, 0, 0, u32(0))),
		streamCase("wu_zero_stream", ErrCodeProtocol, frameBytes(TypeWindowUpdate, 0, 3, u32(0))),
		okCase("wu_reserved_bit", TypeWindowUpdate, frameBytes(TypeWindowUpdate, 0, 3, u32(1<<31|1))),

		// CONTINUATION (§6.10).
		connCase("continuation_alone", ErrCodeProtocol, frameBytes(TypeContinuation, endH, 1, nil)),
		connCase("continuation_stream_0_alone", ErrCodeProtocol, frameBytes(TypeContinuation, endH, 0, nil)),
		okCase("headers_continuation", TypeHeaders, cat(frameBytes(TypeHeaders, 0, 1, nil), frameBytes(TypeContinuation, 0, 1, nil), frameBytes(TypeContinuation, endH, 1, nil))),
		okCase("push_continuation", TypePushPromise, cat(frameBytes(TypePushPromise, 0, 1, u32(2)), frameBytes(TypeContinuation, endH, 1, nil))),
		connCase("headers_then_data", ErrCodeProtocol, cat(frameBytes(TypeHeaders, 0, 1, nil), frameBytes(TypeData, 0, 1, nil))),
		connCase("headers_then_ping", ErrCodeProtocol, cat(frameBytes(TypeHeaders, 0, 1, nil), pingWire)),
		connCase("headers_then_unknown", ErrCodeProtocol, cat(frameBytes(TypeHeaders, 0, 1, nil), frameBytes(0x77, 0, 1, nil))),
		connCase("headers_then_other_stream", ErrCodeProtocol, cat(frameBytes(TypeHeaders, 0, 1, nil), frameBytes(TypeContinuation, endH, 3, nil))),
		connCase("headers_then_headers", ErrCodeProtocol, cat(frameBytes(TypeHeaders, 0, 1, nil), frameBytes(TypeHeaders, endH, 1, nil))),
		connCase("push_then_data", ErrCodeProtocol, cat(frameBytes(TypePushPromise, 0, 1, u32(2)), frameBytes(TypeData, 0, 1, nil))),
		{name: "continuation_flood", wire: cat(frameBytes(TypeHeaders, 0, 1, nil), bytes.Repeat(frameBytes(TypeContinuation, 0, 1, nil), 100)),
			code: ErrCodeEnhanceYourCalm, reason: "continuation_flood", cfg: ReaderConfig{MaxHeaderListSize: 1}},
		{name: "header_block_too_large", wire: cat(frameBytes(TypeHeaders, 0, 1, make([]byte, 10000)), frameBytes(TypeContinuation, 0, 1, make([]byte, 10000))),
			code: ErrCodeEnhanceYourCalm, reason: "header_block_too_large", cfg: ReaderConfig{MaxHeaderListSize: 100}},
		{name: "header_block_too_large_first", wire: frameBytes(TypeHeaders, 0, 1, make([]byte, 20000)),
			code: ErrCodeEnhanceYourCalm, reason: "header_block_too_large", cfg: ReaderConfig{MaxHeaderListSize: 100, MaxFrameSize: 1 << 20}},

		// Unknown types are skipped.
		okCase("unknown_skipped", TypePing, cat(frameBytes(0xa, 0xff, 1, []byte("whatever")), frameBytes(0xff, 0, 0, nil), pingWire)),
		okCase("unknown_big_skipped", TypePing, cat(frameBytes(0xb, 0, 1, make([]byte, 16384)), pingWire)),
	}
	return cs
}

func TestFrameRules(t *testing.T) {
	needHPACK(t)
	for _, tc := range ruleCases() {
		for _, rc := range readerCases(tc.wire) {
			t.Run(tc.name+"/"+rc.name, func(t *testing.T) {
				pool := bufpool.New(nil)
				cfg := tc.cfg
				cfg.Pool = pool
				r := NewReader(rc.src(), cfg)
				defer func() {
					r.Close()
					if n := pool.Outstanding(); n != 0 {
						t.Errorf("pool outstanding = %d after Close", n)
					}
				}()
				f, err := r.ReadFrame()
				if tc.ok {
					if err != nil {
						t.Fatalf("err = %v, want a %v frame", err, tc.want)
					}
					if f.Header().Type != tc.want {
						t.Fatalf("frame %v, want %v", f.Header(), tc.want)
					}
					if d, ok := f.(*DataFrame); ok && d.Data != nil {
						d.Data.Free()
					}
					if _, err := r.ReadFrame(); err != io.EOF {
						t.Fatalf("after the frame: %v, want EOF", err)
					}
					return
				}
				if f != nil {
					t.Fatalf("got frame %v with err %v", f.Header(), err)
				}
				if tc.stream {
					var se StreamError
					if !errors.As(err, &se) || se.Code != tc.code || se.StreamID == 0 || se.Reason == "" {
						t.Fatalf("err = %v, want stream error %v", err, tc.code)
					}
					if tc.reason != "" && se.Reason != tc.reason {
						t.Fatalf("reason %q, want %q", se.Reason, tc.reason)
					}
					// The connection goes on: nothing left but EOF.
					if _, err := r.ReadFrame(); err != io.EOF {
						t.Fatalf("after stream error: %v, want EOF", err)
					}
					return
				}
				var ce ConnError
				if !errors.As(err, &ce) || ce.Code != tc.code || ce.Reason == "" {
					t.Fatalf("err = %v, want connection error %v", err, tc.code)
				}
				if tc.reason != "" && ce.Reason != tc.reason {
					t.Fatalf("reason %q, want %q", ce.Reason, tc.reason)
				}
				if _, err2 := r.ReadFrame(); err2 != err {
					t.Fatalf("connection error not sticky: %v then %v", err, err2)
				}
			})
		}
	}
}

// TestStreamErrorThenNextFrame checks that the frame after a stream error
// is read normally.
func TestStreamErrorThenNextFrame(t *testing.T) {
	needHPACK(t)
	wire := cat(frameBytes(TypeWindowUpdate, 0, 3, u32(0)), frameBytes(TypePriority, 0, 1, make([]byte, 4)),
		frameBytes(TypeHeaders, endH|FlagPriority, 3, cat(u32(3), []byte{16})), pingWire)
	r := NewReader(bytes.NewReader(wire), ReaderConfig{})
	defer r.Close()
	for i := 0; i < 3; i++ {
		if _, err := r.ReadFrame(); !errors.As(err, new(StreamError)) {
			t.Fatalf("frame %d: %v, want a stream error", i, err)
		}
	}
	if f, err := r.ReadFrame(); err != nil || f.Header().Type != TypePing {
		t.Fatalf("after stream errors: %v %v", f, err)
	}
}

func TestPreface(t *testing.T) {
	for _, tc := range []struct {
		name string
		wire string
		err  error
	}{
		{"ok", clientPreface, nil},
		{"bad", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\r", ConnError{ErrCodeProtocol, "bad_preface"}},
		{"http1", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", ConnError{ErrCodeProtocol, "bad_preface"}},
		{"short", "PRI * HTTP/2.0", io.ErrUnexpectedEOF},
	} {
		for _, rc := range readerCases([]byte(tc.wire)) {
			t.Run(tc.name+"/"+rc.name, func(t *testing.T) {
				pool := bufpool.New(nil)
				r := NewReader(rc.src(), ReaderConfig{Pool: pool})
				if err := r.ReadPreface(); err != tc.err {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				if rc.pooled && r.HoldsReadBuffer() {
					t.Error("holds a read buffer after the preface")
				}
				r.Close()
				if pool.Outstanding() != 0 {
					t.Error("pool not balanced")
				}
			})
		}
	}
	// The preface then a frame in one read.
	r := NewReader(bytes.NewReader(cat([]byte(clientPreface), pingWire)), ReaderConfig{})
	if err := r.ReadPreface(); err != nil {
		t.Fatal(err)
	}
	if f, err := r.ReadFrame(); err != nil || f.Header().Type != TypePing {
		t.Fatalf("%v %v", f, err)
	}
	var sink bytes.Buffer
	w := NewWriter(&sink, WriterConfig{})
	w.WritePreface()
	w.Flush()
	if sink.String() != clientPreface {
		t.Fatalf("WritePreface wrote %q", sink.String())
	}
}

// TestTruncatedEOF checks that a stream cut inside a frame reports
// io.ErrUnexpectedEOF and one cut between frames io.EOF.
func TestTruncatedEOF(t *testing.T) {
	wire := cat(pingWire, frameBytes(TypeData, 0, 1, make([]byte, 10000)))
	for cut := 1; cut < len(wire); cut += 997 {
		for _, rc := range readerCases(wire[:cut]) {
			pool := bufpool.New(nil)
			r := NewReader(rc.src(), ReaderConfig{Pool: pool})
			var err error
			for err == nil {
				var f Frame
				f, err = r.ReadFrame()
				if d, ok := f.(*DataFrame); ok && d.Data != nil {
					d.Data.Free()
				}
			}
			want := io.ErrUnexpectedEOF
			if cut == len(pingWire) {
				want = io.EOF
			}
			if err != want {
				t.Fatalf("cut %d %s: %v, want %v", cut, rc.name, err, want)
			}
			r.Close()
			if pool.Outstanding() != 0 {
				t.Fatalf("cut %d %s: pool outstanding %d", cut, rc.name, pool.Outstanding())
			}
		}
	}
}
