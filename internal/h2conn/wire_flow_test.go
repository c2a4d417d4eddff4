package h2conn_test

// Wire-level tests of the window policy: the BDP estimator and what a
// server does when it finishes before the client.

import (
	"bytes"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// RFC 9113 §8.1: a server that completes its response while the client is
// still sending ends the stream with RST_STREAM(NO_ERROR), telling the
// client to stop without an error.
func TestWireResponseCompleteResetsNoError(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		if err := respond(st.pool, s, []byte("early")); err != nil {
			t.Fatal(err)
		}
		p.WantHeaders(1)
		if body, tr := p.WantBodyTrailers(1, false); string(body) != "early" || tr.Get("grpc-status") != "0" {
			t.Fatalf("response body %q trailers %v", body, tr.Fields)
		}
		p.WantRST(1, h2frame.ErrCodeNo)
		st.stillUp()
	})
}

// DATA the client had sent before the server's RST_STREAM(NO_ERROR)
// reached it is ignored (RFC 9113 §5.1, "closed"): not answered with
// STREAM_CLOSED, and not counted against the reset limit, however much of
// it comes. DATA on a stream both sides ended normally still is.
func TestWireDataAfterOurResetIgnored(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{}, wireOpts{})
		st.greet()
		p := st.peer
		p.WriteHeaders(1, false, reqFields("/")...)
		s := st.stream()
		if err := respond(st.pool, s, []byte("early")); err != nil {
			t.Fatal(err)
		}
		p.WantHeaders(1)
		p.WantBodyTrailers(1, false)
		p.WantRST(1, h2frame.ErrCodeNo)
		for range 1500 { // more than the resets a second allowed
			p.WriteData(1, false, []byte{'x'})
		}
		p.WriteData(1, true, []byte{'x'})
		st.stillUp() // a RST_STREAM or GOAWAY would come before the ack

		p.WriteHeaders(3, false, reqFields("/")...)
		p.WriteData(3, true, []byte("req"))
		s = st.stream()
		if _, err := readAll(s); err != nil {
			t.Fatal(err)
		}
		if err := respond(st.pool, s, []byte("done")); err != nil {
			t.Fatal(err)
		}
		p.WantHeaders(3)
		p.WantBodyTrailers(3, true)
		p.WriteData(3, false, []byte{'x'})
		p.WantRST(3, h2frame.ErrCodeStreamClosed)
		st.stillUp()
	})
}

// Unlike grpc-go, the engine does not ping for a bandwidth sample on every
// small RPC: many small requests draw no PING at all.
func TestWireNoPingPerSmallRPC(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		done := make(chan error, 64)
		var pool *bufpool.Pool
		st := newServerTest(t, h2conn.Config{}, wireOpts{handler: func(s *h2conn.Stream) {
			echoHandler(pool, done)(s)
		}})
		pool = st.pool
		st.greet()
		p := st.peer
		delete(p.Ignore, h2frame.TypePing)
		for i := range 50 {
			id := uint32(2*i + 1)
			p.WriteHeaders(id, false, reqFields("/small")...)
			p.WriteData(id, true, bytes.Repeat([]byte{'s'}, 100))
			p.WantHeaders(id) // a PING here would fail the test
			p.WantBodyTrailers(id, true)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		p.WantNothing(quiet)
	})
}

// The BDP estimator: when a bandwidth sample fills the stream window within
// one round trip, the engine raises its SETTINGS_INITIAL_WINDOW_SIZE.
func TestWireBDPGrowsWindow(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		const rtt = 50 * time.Millisecond
		st := newServerTest(t, h2conn.Config{InitialStreamWindow: 65535}, wireOpts{handler: func(s *h2conn.Stream) {
			go func() {
				defer s.Release()
				for {
					b, err := s.Recv()
					if err != nil {
						return
					}
					b.Free() // Recv returned an owned buffer; the data is dropped
				}
			}()
		}})
		st.greet()
		p := st.peer
		delete(p.Ignore, h2frame.TypePing)
		delete(p.Ignore, h2frame.TypeSettings)
		p.WriteHeaders(1, false, reqFields("/upload")...)
		chunk := make([]byte, 16384)
		sent := int64(0)
		for sent < 64<<20 {
			// Send what the windows allow, then look at what came back.
			for {
				conn, stream := p.SendWindow(1)
				n := min(conn, stream, int64(len(chunk)))
				if n <= 0 {
					break
				}
				p.WriteData(1, false, chunk[:n])
				sent += n
			}
			f, err := p.ReadFrame(time.Second)
			if err != nil {
				t.Fatalf("no WINDOW_UPDATE, PING or SETTINGS while uploading: %v", err)
			}
			switch f.Type {
			case h2frame.TypePing:
				if f.IsAck() {
					continue
				}
				// A sample starts: send a whole stream window's worth, as
				// fast as the credit comes back, before the ACK goes out
				// one round trip later. The link is window-limited.
				for inSample := int64(0); inSample < 65535; {
					conn, stream := p.SendWindow(1)
					if n := min(conn, stream, int64(len(chunk))); n > 0 {
						p.WriteData(1, false, chunk[:n])
						sent += n
						inSample += n
						continue
					}
					if g, err := p.ReadFrame(time.Second); err != nil || g.Type != h2frame.TypeWindowUpdate {
						t.Fatalf("waiting for credit during a sample: %v %v", g, err)
					}
				}
				time.Sleep(rtt)
				p.WritePingAck(f.PingData())
			case h2frame.TypeSettings:
				if f.IsAck() {
					continue
				}
				p.WriteSettingsAck()
				if v := p.RemoteSettings[h2frame.SettingInitialWindowSize]; v > 65535 {
					p.WriteData(1, true, nil)
					return // the window grew
				}
			case h2frame.TypeWindowUpdate:
			default:
				t.Fatalf("unexpected %v", f)
			}
		}
		t.Fatalf("the stream window never grew in %d MiB of window-limited upload", sent>>20)
	})
}
