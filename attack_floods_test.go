package leangrpc_test

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// requestBlock is the header block of a request for path.
func requestBlock(path string) []byte {
	return h2test.EncodeHeaders(h2test.Fields(request(path)...)...)
}

// rapidResets is a rapid-reset burst: n unary streams, each opened and
// reset at once.
func rapidResets(n int) []byte {
	block := requestBlock(unaryPath)
	rst := binary.BigEndian.AppendUint32(nil, uint32(h2frame.ErrCodeCancel))
	var b []byte
	for i := range n {
		id := uint32(1 + 2*i)
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders, id, block)
		b = h2test.AppendFrame(b, h2frame.TypeRSTStream, 0, id, rst)
	}
	return b
}

// TestAttackRapidReset: CVE-2023-44487, streams opened and reset at once,
// thousands a second, on connection after connection. Each connection gets
// GOAWAY ENHANCE_YOUR_CALM.
func TestAttackRapidReset(t *testing.T) {
	tg := attackTarget(t)
	b := rapidResets(5000)
	for range 4 {
		p := tg.peer(t)
		done := flood(p.Conn, b)
		wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
		<-done
	}
	tg.legit(t)
}

// TestAttackResetFlood: CVE-2019-9514, requests the server must reset
// (here: an uppercase field name, RFC 9113 §8.2.1) sent faster than the
// resets are read. The streams the server had to reset count as the
// peer's resets: GOAWAY ENHANCE_YOUR_CALM.
func TestAttackResetFlood(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	block := h2test.EncodeHeaders(h2test.Fields(request(unaryPath, "X-Upper", "1")...)...)
	var b []byte
	for i := range 5000 {
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders|h2frame.FlagEndStream, uint32(1+2*i), block)
	}
	done := flood(p.Conn, b)
	wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
	<-done
	tg.legit(t)
}

// TestAttackPingFlood: CVE-2019-9512, PINGs without end. grpc-go's
// enforcement policy (no pings without streams, strikes) ends it with
// GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
func TestAttackPingFlood(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	var b []byte
	for i := range 100_000 {
		b = h2test.AppendFrame(b, h2frame.TypePing, 0, 0, binary.BigEndian.AppendUint64(nil, uint64(i)))
	}
	done := flood(p.Conn, b)
	if f := wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm); string(f.DebugData()) != "too_many_pings" {
		t.Errorf("GOAWAY debug data %q, want too_many_pings", f.DebugData())
	}
	<-done
	tg.legit(t)
}

// TestAttackSettingsFlood: CVE-2019-9515, SETTINGS frames, each owing an
// ACK, from a peer that reads nothing until its flood is written. The
// server cuts the flood short, long before its ACKs fill the socket
// buffers, so that the GOAWAY ENHANCE_YOUR_CALM still finds room and the
// peer learns why it was cut off; pool buffers stay bounded meanwhile.
func TestAttackSettingsFlood(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	bufs := bufpool.Default().Outstanding()
	settings := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, uint16(h2frame.SettingInitialWindowSize)), 1<<16)
	var b []byte
	for range 1_000_000 {
		b = h2test.AppendFrame(b, h2frame.TypeSettings, 0, 0, settings)
	}
	done := flood(p.Conn, b)
	n := <-done // the peer reads nothing before this
	if held := bufpool.Default().Outstanding() - bufs; held > 64 {
		t.Errorf("a SETTINGS flood of %d bytes left %d pool buffers held", n, held)
	}
	if n == len(b) {
		t.Errorf("the server read all %d SETTINGS frames of a peer that reads none of its ACKs", len(b)/15)
	}
	if f := wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm); string(f.DebugData()) != "settings_flood" {
		t.Errorf("GOAWAY debug data %q, want settings_flood", f.DebugData())
	}
	tg.legit(t)
}

// TestAttackEmptyDataFlood: CVE-2019-9518, DATA frames with neither
// payload nor END_STREAM: GOAWAY ENHANCE_YOUR_CALM.
func TestAttackEmptyDataFlood(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	p.WriteHeadersBlock(1, h2frame.FlagEndHeaders, requestBlock(streamingPath))
	var b []byte
	for range 100_000 {
		b = h2test.AppendFrame(b, h2frame.TypeData, 0, 1, nil)
	}
	done := flood(p.Conn, b)
	wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
	<-done
	tg.legit(t)
}

// TestAttackWindowUpdateOverflow: WINDOW_UPDATEs that take a window past
// 2^31-1 (RFC 9113 §6.9.1): on a stream, RST_STREAM FLOW_CONTROL_ERROR;
// on the connection, GOAWAY FLOW_CONTROL_ERROR.
func TestAttackWindowUpdateOverflow(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	p.WriteHeadersBlock(1, h2frame.FlagEndHeaders, requestBlock(streamingPath))
	p.WriteWindowUpdate(1, math.MaxInt32)
	p.WantRST(1, h2frame.ErrCodeFlowControl)
	p.WriteWindowUpdate(0, math.MaxInt32)
	wantGoAway(t, p, h2frame.ErrCodeFlowControl)
	wantEnd(t, p.Conn, attackWait)
	tg.legit(t)
}

// TestAttackPriorityShuffle: CVE-2019-9513 (resource loop), PRIORITY frames
// that keep reshaping the dependency tree. RFC 9113 deprecates the scheme
// and the server keeps no tree: the frames cost a parse each, hold nothing,
// and the connection goes on serving.
func TestAttackPriorityShuffle(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	before := heapInUse()
	var b []byte
	for i := range 200_000 {
		id := uint32(1 + 2*(i%500))
		dep := uint32(1 + 2*((i*7+3)%500))
		if dep == id {
			dep += 2
		}
		pr := binary.BigEndian.AppendUint32(nil, dep|1<<31)
		b = h2test.AppendFrame(b, h2frame.TypePriority, 0, id, append(pr, byte(i)))
	}
	<-flood(p.Conn, b)
	id := uint32(1001)
	p.WriteHeadersBlock(id, h2frame.FlagEndHeaders, requestBlock(unaryPath))
	p.WriteData(id, true, unaryRequest(1))
	if h := p.WantHeaders(id); h.Get(":status") != "200" {
		t.Fatalf("a request after the PRIORITY flood: status %q", h.Get(":status"))
	}
	p.WantBodyTrailers(id, true)
	if grown := heapInUse() - before; grown > 1<<20 {
		t.Errorf("200000 PRIORITY frames left %d KiB more heap in use", grown>>10)
	}
	tg.legit(t)
}

// drain reads and drops frames for d; the connection must stay open.
func drain(p *h2test.Peer, d time.Duration) {
	p.T.Helper()
	deadline := time.Now().Add(d)
	for {
		f, err := p.ReadFrame(time.Until(deadline))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if err != nil {
			p.T.Fatalf("connection ended: %v", err)
		}
		if f.Type == h2frame.TypeGoAway {
			p.T.Fatalf("GOAWAY %v %q", f.ErrCode(), f.DebugData())
		}
	}
}

// openStreams opens n streaming calls on p that stay open (no END_STREAM)
// and returns the RST_STREAM codes received for them: until resets of them
// came, or nothing came for a second.
func openStreams(t *testing.T, p *h2test.Peer, n, resets int) map[h2frame.ErrCode]int {
	t.Helper()
	block := requestBlock(streamingPath)
	var b []byte
	for i := range n {
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders, uint32(1+2*i), block)
	}
	<-flood(p.Conn, b)
	codes := map[h2frame.ErrCode]int{}
	for got := 0; got < resets; {
		f, err := p.ReadFrame(time.Second)
		if err != nil {
			break
		}
		if f.Type == h2frame.TypeRSTStream {
			codes[f.ErrCode()]++
			got++
		}
	}
	return codes
}

// TestAttackManyStreamsConfigured: with MaxConcurrentStreams set, streams
// over it are refused with REFUSED_STREAM (RFC 9113 §5.1.2), as by grpc-go.
func TestAttackManyStreamsConfigured(t *testing.T) {
	tg := attackTarget(t, leangrpc.MaxConcurrentStreams(100))
	p := tg.peer(t)
	codes := openStreams(t, p, 1000, 900)
	if codes[h2frame.ErrCodeRefusedStream] != 900 {
		t.Errorf("1000 streams over a limit of 100: resets %v, want 900 REFUSED_STREAM", codes)
	}
	tg.legit(t)
}

// TestAttackManyStreamsDefault: one client opens many concurrent streams
// on one connection of a server with default options. The server
// advertises a limit of 1000 (h2conn.ServerMaxConcurrentStreams) and
// refuses streams over it with REFUSED_STREAM, so the streams it holds
// keep at most a handler goroutine each; a flood of 20,000 streams ends at
// the reset limit.
func TestAttackManyStreamsDefault(t *testing.T) {
	const limit = 1000
	tg := attackTarget(t)
	p := tg.peer(t)
	if got := p.RemoteSettings[h2frame.SettingMaxConcurrentStreams]; got != limit {
		t.Fatalf("the server advertises MAX_CONCURRENT_STREAMS %d, want %d", got, limit)
	}
	base := runtime.NumGoroutine()
	codes := openStreams(t, p, limit+500, 500)
	if codes[h2frame.ErrCodeRefusedStream] != 500 {
		t.Errorf("%d streams over a limit of %d: resets %v, want 500 REFUSED_STREAM", limit+500, limit, codes)
	}
	if grown := runtime.NumGoroutine() - base; grown > limit+limit/10 {
		t.Errorf("%d open streams hold %d goroutines", limit, grown)
	}

	p2 := tg.peer(t)
	block := requestBlock(streamingPath)
	var b []byte
	for i := range 20_000 {
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders, uint32(1+2*i), block)
	}
	<-flood(p2.Conn, b)
	wantGoAway(t, p2, h2frame.ErrCodeEnhanceYourCalm)
	tg.legit(t)
}

// TestMaxConcurrentStreamsOverridesDefault: the MaxConcurrentStreams
// option replaces the default limit, upwards too; math.MaxUint32 is
// grpc-go's unlimited default, which leaves the setting out.
func TestMaxConcurrentStreamsOverridesDefault(t *testing.T) {
	for _, n := range []uint32{10, 5000, math.MaxUint32} {
		tg := attackTarget(t, leangrpc.MaxConcurrentStreams(n))
		p := tg.peer(t)
		got, sent := p.RemoteSettings[h2frame.SettingMaxConcurrentStreams]
		if n == math.MaxUint32 {
			if sent {
				t.Errorf("MaxConcurrentStreams(MaxUint32): the server advertises %d, want no limit", got)
			}
		} else if got != n {
			t.Errorf("MaxConcurrentStreams(%d): the server advertises %d", n, got)
		}
	}
}

// TestAttackDataDribble: CVE-2019-9511, a client that asks for large
// responses on many streams with a window of one byte and grants it a byte
// at a time. The server's buffers stay bounded by the streams (each
// holds at most the message it is sending), not by the responses asked for.
func TestAttackDataDribble(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 1})
	bufs := bufpool.Default().Outstanding()
	const streams, size = 50, 1 << 20
	for i := range streams {
		id := uint32(1 + 2*i)
		p.WriteHeadersBlock(id, h2frame.FlagEndHeaders, requestBlock(unaryPath))
		p.WriteData(id, true, unaryRequest(size))
	}
	for range 20 {
		for i := range streams {
			p.WriteWindowUpdate(uint32(1+2*i), 1)
		}
		p.WriteWindowUpdate(0, streams)
	}
	drain(p, 200*time.Millisecond)
	if held := bufpool.Default().Outstanding() - bufs; held > 4*streams {
		t.Errorf("%d streams dribbling 1 MiB responses hold %d pool buffers", streams, held)
	}
	tg.legit(t)
}

// TestAttackInternalDataBuffering: CVE-2019-9517, a client that opens a
// large window, asks for large responses and stops reading the socket. The
// server buffers at most what it is writing per stream; its handlers wait
// on flow control and the socket, holding nothing more.
func TestAttackInternalDataBuffering(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: math.MaxInt32})
	p.WriteWindowUpdate(0, math.MaxInt32-h2frame.DefaultInitialWindow)
	bufs := bufpool.Default().Outstanding()
	before := heapInUse()
	const streams, size = 32, 2 << 20
	var b []byte
	for i := range streams {
		id := uint32(1 + 2*i)
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders, id, requestBlock(unaryPath))
		b = h2test.AppendFrame(b, h2frame.TypeData, h2frame.FlagEndStream, id, unaryRequest(size))
	}
	<-flood(p.Conn, b)
	time.Sleep(300 * time.Millisecond) // the handlers answer; nobody reads
	heldBufs := bufpool.Default().Outstanding() - bufs
	grown := heapInUse() - before
	t.Logf("%d streams of %d MiB responses to a peer that does not read: %d pool buffers, %d MiB more heap", streams, size>>20, heldBufs, grown>>20)
	// Each handler holds its response and at most one pooled buffer
	// being written; more would mean responses queued for the peer.
	if heldBufs > 2*streams {
		t.Errorf("responses to a peer that does not read hold %d pool buffers, want at most %d", heldBufs, 2*streams)
	}
	// The heap holds each response and its encoding, with room for the
	// race detector's shadow: not a multiple of them.
	if grown > 4*streams*size {
		t.Errorf("responses to a peer that does not read hold %d MiB of heap, want at most %d", grown>>20, 4*streams*size>>20)
	}
	tg.legit(t)
}
