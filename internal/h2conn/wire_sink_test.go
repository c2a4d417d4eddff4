package h2conn_test

// Wire-level tests of RecvInto: DATA of a message spanning frames lands in
// the receiver's buffer at its offset (sink.go), also against a hostile
// peer whose DATA lands before the engine's flow-control or content-length
// checks refuse its frame.

import (
	"bytes"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// gatherResult is what gatherInto saw.
type gatherResult struct {
	landed, copied int
	extra          []byte // bytes past the range, from the last queued buffer
	err            error
}

// gatherInto receives bytes [from, to) of dst as grpcwire's Parser does:
// queued payloads are copied in, landed bytes counted. Bytes past to are
// returned in extra.
func gatherInto(s *h2conn.Stream, dst *bufpool.Buffer, from, to int) gatherResult {
	var r gatherResult
	got := from
	for got < to {
		b, n, err := s.RecvInto(dst, got, to)
		if err != nil {
			r.err = err
			return r
		}
		if b != nil {
			k := copy(dst.Bytes()[got:to], b.Bytes())
			got += k
			r.copied += k
			r.extra = append(r.extra, b.Bytes()[k:]...)
			b.Free() // RecvInto returned an owned buffer
			continue
		}
		if n <= 0 || got+n > to {
			r.err = errBadLanding
			return r
		}
		got += n
		r.landed += n
	}
	return r
}

type landingError struct{}

func (landingError) Error() string { return "RecvInto reported a landing outside the range" }

var errBadLanding error = landingError{}

// pattern returns n bytes that differ at every offset of a frame.
func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i) + byte(i>>8)*3
	}
	return p
}

// startGather registers dst on the next server stream and gathers into it
// on a goroutine; the registration is in place when it returns.
func startGather(st *serverTest, total int) (*h2conn.Stream, *bufpool.Buffer, chan gatherResult) {
	s := st.stream()
	dst := st.pool.Get(total)
	clear(dst.Bytes())
	ch := make(chan gatherResult, 1)
	go func() { ch <- gatherInto(s, dst, 0, total) }()
	settle() // parked in RecvInto, registered
	return s, dst, ch
}

// A message in several DATA frames lands in one buffer, each frame at its
// offset, with no payload buffer handed out.
func TestWireSinkMultiFrameMessage(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		const total = 3*16384 + 3000 // every frame large enough to land
		s, dst, ch := startGather(st, total)
		defer s.Release()
		defer dst.Free()
		msg := pattern(total, 1)
		for off := 0; off < total; off += 16384 {
			p.WriteData(1, false, msg[off:min(off+16384, total)])
		}
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.landed != total || r.copied != 0 {
			t.Fatalf("landed %d, copied %d; want all %d landed", r.landed, r.copied, total)
		}
		if !bytes.Equal(dst.Bytes(), msg) {
			t.Fatal("the message's bytes landed out of place")
		}
		st.stillUp()
	})
}

// Padded frames land without their pad length byte and padding, and the
// padding and landed bytes go back to the flow-control windows: a sender
// limited to a 64 KiB window gets the credit to send far more.
func TestWireSinkPaddedAndCredited(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: 65535}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		const chunk, frames = 10000, 30
		const total = chunk * frames
		s, dst, ch := startGather(st, total)
		defer s.Release()
		defer dst.Free()
		msg := pattern(total, 7)
		for i := range frames {
			for {
				_, stream := p.SendWindow(1)
				if stream >= chunk+1+200 {
					break
				}
				p.WantWindowUpdate(1) // the sender waits for credit
			}
			p.WriteDataPadded(1, false, msg[i*chunk:(i+1)*chunk], uint8(i*7))
		}
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.landed != total || r.copied != 0 {
			t.Fatalf("landed %d, copied %d; want all %d landed", r.landed, r.copied, total)
		}
		if !bytes.Equal(dst.Bytes(), msg) {
			t.Fatal("padded data landed out of place")
		}
	})
}

// Data queued before the registration is moved into the range first and
// reported as landed, with the landed data after it; a frame running past
// the range lands up to its end and the rest comes as a queued buffer, in
// order.
func TestWireSinkOrderAroundRange(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		defer s.Release()
		const total = 40000
		wire := pattern(total+5000, 3)
		p.WriteData(1, false, wire[:12000]) // before any registration
		settle()
		dst := st.pool.Get(total)
		defer dst.Free()
		ch := make(chan gatherResult, 1)
		go func() { ch <- gatherInto(s, dst, 0, total) }()
		settle()
		p.WriteData(1, false, wire[12000:28000])
		p.WriteData(1, false, wire[28000:44000]) // past the range
		p.WriteData(1, true, wire[44000:])
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.copied != 0 || r.landed != total {
			t.Fatalf("copied %d, landed %d; want all %d landed", r.copied, r.landed, total)
		}
		if !bytes.Equal(dst.Bytes(), wire[:total]) {
			t.Fatal("bytes out of place in the range")
		}
		rest, err := readAll(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := append(r.extra, rest...); !bytes.Equal(got, wire[total:]) {
			t.Fatalf("%d bytes after the range; want %d in order", len(got), len(wire)-total)
		}
	})
}

// A peer's RST_STREAM in the middle of a message ends the gathering with
// its error after what landed; the registration's reference is dropped (the
// pool leak check would catch it).
func TestWireSinkResetMidMessage(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s, dst, ch := startGather(st, 100000)
		defer s.Release()
		p.WriteData(1, false, pattern(16384, 1))
		settle()
		p.WriteRST(1, h2frame.ErrCodeCancel)
		r := <-ch
		dst.Free() // the receiver gives up its buffer
		wantH2Error(t, r.err, h2frame.ErrCodeCancel, h2conn.InitiatorPeer)
		if r.landed != 16384 {
			t.Fatalf("landed %d before the reset; want 16384", r.landed)
		}
		st.stillUp()
	})
}

// A receiver that resets its stream while a frame is being read into its
// buffer, and frees the buffer, leaves the engine a reference of its own:
// the rest of the frame is read into live memory and then dropped, the
// connection goes on, and no buffer leaks.
func TestWireSinkUserResetDuringLanding(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s, dst, ch := startGather(st, 100000)
		data := pattern(16000, 5)
		frame := append([]byte{0, 0x3e, 0x80, byte(h2frame.TypeData), 0, 0, 0, 0, 1}, data...)
		p.WriteBytes(frame[:9+6000]) // the reader is inside the payload
		settle()
		s.Reset(h2frame.ErrCodeCancel)
		r := <-ch
		dst.Free()
		if r.err == nil {
			t.Fatal("gathering went on after Reset")
		}
		p.WantRST(1, h2frame.ErrCodeCancel)
		p.WriteBytes(frame[9+6000:])
		s.Release()
		st.stillUp() // DATA after our RST_STREAM is ignored, as without a sink
	})
}

// A range registered without a buffer holds none until data comes; the
// first landed bytes come with the buffer the engine took, whose bytes are
// the stream's from the range's start.
func TestWireSinkLazyBuffer(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		defer s.Release()
		const total = 3 * 16384
		base := st.pool.Outstanding()
		type first struct {
			b   *bufpool.Buffer
			n   int
			err error
		}
		ch := make(chan first, 1)
		go func() {
			b, n, err := s.RecvInto(nil, 0, total)
			ch <- first{b, n, err}
		}()
		settle()
		if n := st.pool.Outstanding(); n != base {
			t.Fatalf("%d buffers taken before any data", n-base)
		}
		msg := pattern(total, 9)
		p.WriteData(1, false, msg[:16384])
		f := <-ch
		if f.err != nil || f.b == nil || f.n != 16384 || f.b.Len() != total {
			t.Fatalf("first RecvInto: buffer %v, n %d, err %v; want a %d-byte buffer and 16384", f.b != nil, f.n, f.err, total)
		}
		dst := f.b
		defer dst.Free() // handed over by RecvInto: ours
		res := make(chan gatherResult, 1)
		go func() { res <- gatherInto(s, dst, 16384, total) }()
		p.WriteData(1, false, msg[16384:32768])
		p.WriteData(1, false, msg[32768:])
		r := <-res
		if r.err != nil || r.landed != total-16384 || r.copied != 0 {
			t.Fatalf("landed %d, copied %d, err %v", r.landed, r.copied, r.err)
		}
		if !bytes.Equal(dst.Bytes(), msg) {
			t.Fatal("bytes out of place")
		}
	})
}

// A stream that fails while its lazily registered range has taken a buffer
// the receiver was not handed yet frees it (the leak check would fail).
func TestWireSinkLazyBufferReset(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		ch := make(chan error, 1)
		go func() {
			b, _, err := s.RecvInto(nil, 0, 100000)
			if b != nil {
				b.Free()
			}
			ch <- err
		}()
		settle()
		p.WriteData(1, false, pattern(16384, 1))
		p.WriteRST(1, h2frame.ErrCodeCancel)
		settle()
		<-ch // either the landed bytes with the buffer, or the reset
		s.Release()
		st.stillUp()
	})
}

// A range registered without a buffer for more than the peer may send
// takes a buffer of what arrived plus the stream window only (a peer
// announcing a long message and sending little makes us hold little), and
// the range ends with that buffer; the same when queued bytes are moved in
// at registration.
func TestWireSinkLazyBufferBoundedByWindow(t *testing.T) {
	const window = 65535
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: window, DisableBDP: true}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		defer s.Release()
		type first struct {
			b   *bufpool.Buffer
			n   int
			err error
		}
		ch := make(chan first, 1)
		go func() {
			b, n, err := s.RecvInto(nil, 0, 1<<20)
			ch <- first{b, n, err}
		}()
		settle()
		msg := pattern(2*16384, 5)
		p.WriteData(1, false, msg[:16384])
		f := <-ch
		if f.err != nil || f.b == nil || f.n != 16384 || f.b.Len() != 16384+window {
			t.Fatalf("first RecvInto: buffer %v (len %d), n %d, err %v; want a %d-byte buffer and 16384", f.b != nil, lenOf(f.b), f.n, f.err, 16384+window)
		}
		dst := f.b
		defer dst.Free() // handed over by RecvInto: ours
		res := make(chan gatherResult, 1)
		go func() { res <- gatherInto(s, dst, 16384, 2*16384) }()
		p.WriteData(1, false, msg[16384:])
		if r := <-res; r.err != nil || r.landed+r.copied != 16384 {
			t.Fatalf("landed %d, copied %d, err %v", r.landed, r.copied, r.err)
		}
		if !bytes.Equal(dst.Bytes()[:2*16384], msg) {
			t.Fatal("bytes out of place")
		}
	})
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: window, DisableBDP: true}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		defer s.Release()
		msg := pattern(1000, 7)
		p.WriteData(1, false, msg)
		settle() // queued
		b, n, err := s.RecvInto(nil, 0, 1<<20)
		if err != nil || b == nil || n != 1000 || b.Len() != 1000+window {
			t.Fatalf("RecvInto: buffer %v (len %d), n %d, err %v; want a %d-byte buffer and 1000", b != nil, lenOf(b), n, err, 1000+window)
		}
		if !bytes.Equal(b.Bytes()[:1000], msg) {
			t.Fatal("queued bytes out of place")
		}
		b.Free() // handed over by RecvInto: ours
	})
}

func lenOf(b *bufpool.Buffer) int {
	if b == nil {
		return -1
	}
	return b.Len()
}

// A frame over the stream window is read into the registered buffer (the
// sink is asked before the frame is judged) and then refused: the stream is
// reset with FLOW_CONTROL_ERROR, the receiver is told only about the bytes
// of the accepted frames before it, those are intact, and no reference
// leaks (the harness checks the pool).
func TestWireSinkRefusedFrameOverStreamWindow(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: 6000}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		const total = 50000
		s, dst, ch := startGather(st, total)
		defer s.Release()
		msg := pattern(total, 9)
		p.WriteData(1, false, msg[:4000]) // within the window: lands
		settle()
		// 9000 bytes: over what is left of the window even after the
		// receiver's credit for the first frame (announced at a quarter).
		p.WriteData(1, false, msg[4000:13000])
		r := <-ch
		wantH2Error(t, r.err, h2frame.ErrCodeFlowControl, h2conn.InitiatorEngine)
		if r.landed != 4000 || !bytes.Equal(dst.Bytes()[:4000], msg[:4000]) {
			t.Errorf("landed %d before the refused frame, want the first 4000 intact", r.landed)
		}
		dst.Free()
		st.wantStreamOrConnError(1, h2frame.ErrCodeFlowControl)
		st.stillUp()
	})
}

// The same for a frame that breaks the request's content-length.
func TestWireSinkRefusedFrameOverContentLength(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/", "content-length", "10000")...)
		const total = 50000
		s, dst, ch := startGather(st, total)
		defer s.Release()
		msg := pattern(total, 11)
		p.WriteData(1, false, msg[:8000])
		settle()
		p.WriteData(1, false, msg[8000:16000]) // 16000 > content-length
		r := <-ch
		if r.err == nil {
			t.Fatal("gathering went on past the content-length")
		}
		if r.landed != 8000 || !bytes.Equal(dst.Bytes()[:8000], msg[:8000]) {
			t.Errorf("landed %d, want the first 8000 intact", r.landed)
		}
		dst.Free()
		st.wantStreamOrConnError(1, h2frame.ErrCodeProtocol)
		st.stillUp()
	})
}

// A padded frame whose padding, not data, breaks the stream window: the
// data lands, the frame is refused, nothing of it is reported.
func TestWireSinkRefusedPaddingOverStreamWindow(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: 6000}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		const total = 50000
		s, dst, ch := startGather(st, total)
		defer s.Release()
		msg := pattern(total, 13)
		p.WriteDataPadded(1, false, msg[:5900], 200) // 5900+1+200 > 6000
		r := <-ch
		wantH2Error(t, r.err, h2frame.ErrCodeFlowControl, h2conn.InitiatorEngine)
		if r.landed != 0 {
			t.Errorf("landed %d of a refused frame", r.landed)
		}
		dst.Free()
		st.wantStreamOrConnError(1, h2frame.ErrCodeFlowControl)
	})
}
