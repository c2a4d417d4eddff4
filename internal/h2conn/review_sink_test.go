package h2conn_test

// Review tests of landing (sink.go) against a hostile peer: DATA that lands
// in the registered buffer before the engine's flow-control or
// content-length checks refuse its frame.

import (
	"bytes"
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// A frame over the stream window is read into the registered buffer (the
// sink is asked before the frame is judged) and then refused: the stream is
// reset with FLOW_CONTROL_ERROR, the receiver is told only about the bytes
// of the accepted frames before it, those are intact, and no reference
// leaks (the harness checks the pool).
func TestReviewSinkFrameOverStreamWindow(t *testing.T) {
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
func TestReviewSinkFrameOverContentLength(t *testing.T) {
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
func TestReviewSinkPaddingOverStreamWindow(t *testing.T) {
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
