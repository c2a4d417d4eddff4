//go:build linux && !leangrpcportable

package h2conn_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// TestReadEachErrors checks the errors a peer's frames cause when they
// arrive while the reader reads through sockio's ReadEach, as it does over a
// socket once more than one stream is open: the same RST_STREAM or GOAWAY
// as through ReadFrame (the wire tests, over pipes), and Serve's error.
// Two open streams put the reader there; the faulty frames follow in reads
// of their own.
func TestReadEachErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(p *h2test.Peer)
		// stream is the stream to be reset, or 0 for a connection error.
		stream uint32
	}{
		{"stream error from the frame layer", func(p *h2test.Peer) {
			p.WriteRaw(h2frame.TypeWindowUpdate, 0, 1, []byte{0, 0, 0, 0})
		}, 1},
		{"stream error from the engine", func(p *h2test.Peer) {
			p.WriteHeaders(5, true, reqFields("/", "X-Upper", "v")...)
		}, 5},
		{"connection error from the frame layer", func(p *h2test.Peer) {
			p.WriteRaw(h2frame.TypeWindowUpdate, 0, 0, []byte{0, 0, 0, 0})
		}, 0},
		{"connection error from the engine", func(p *h2test.Peer) {
			p.WriteRaw(h2frame.TypeRSTStream, 0, 9, []byte{0, 0, 0, 8})
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, served := readEachServer(t)
			tc.send(p)
			if tc.stream != 0 {
				p.WantRST(tc.stream, h2frame.ErrCodeProtocol)
				d := [8]byte{'u', 'p'}
				p.WritePing(d)
				p.WantPingAck(d)
				return
			}
			p.WantGoAway(h2frame.ErrCodeProtocol)
			select {
			case err := <-served:
				served <- err
				var e *h2conn.Error
				if !errors.As(err, &e) || e.Code != h2frame.ErrCodeProtocol || e.Initiator != h2conn.InitiatorEngine {
					t.Fatalf("Serve = %v; want the engine's PROTOCOL_ERROR", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Serve did not return after the GOAWAY")
			}
		})
	}
}

// readEachServer starts a server engine over TCP with pooled reads and a
// scripted client that opens two streams, after which the reader is parked
// in ReadEach. It returns the peer and Serve's result.
func readEachServer(t *testing.T) (*h2test.Peer, chan error) {
	t.Helper()
	h2test.CheckGoroutines(t)
	pool := bufpool.New(nil)
	h2test.CheckPool(t, pool)
	cn, sn := h2test.TCPPair(t)
	streams := make(chan *h2conn.Stream, 8)
	conn := h2conn.NewServerConn(sn, h2conn.Config{Pool: pool, PooledReads: true},
		h2conn.HandlerFunc(func(s *h2conn.Stream) { streams <- s }))
	served := make(chan error, 1)
	go func() { served <- conn.Serve() }()
	t.Cleanup(func() {
		cn.Close()
		conn.Close()
		err := <-served
		served <- err
		for len(streams) > 0 {
			(<-streams).Release()
		}
	})

	p := h2test.NewPeer(t, cn, h2test.ClientRole)
	p.Greet()
	p.WriteHeaders(1, false, reqFields("/a")...)
	p.WriteHeaders(3, false, reqFields("/b")...)
	for range 2 {
		select {
		case s := <-streams:
			t.Cleanup(s.Release)
		case <-time.After(5 * time.Second):
			t.Fatal("the two streams did not reach the handler")
		}
	}
	waitReader(t, "sockio.(*Conn).ReadEach")
	return p, served
}

// waitReader waits until the engine's reader is parked in the poller
// under fn.
func waitReader(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, "h2conn.(*Conn).readLoop") && strings.Contains(g, fn) {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the reader did not park in %s within 5s", fn)
}

// TestReadEachLeavesAtGoAway checks that a GOAWAY ends the ReadEach: the
// peer usually closes next, and a close queued behind the GOAWAY's bytes
// is seen at once by ReadFrame's first read, while ReadEach would park
// without that read.
func TestReadEachLeavesAtGoAway(t *testing.T) {
	p, _ := readEachServer(t)
	d := [8]byte{1}
	p.WritePing(d) // more bytes: the reader stays in ReadEach
	p.WantPingAck(d)
	waitReader(t, "sockio.(*Conn).ReadEach")
	p.WriteGoAway(0, h2frame.ErrCodeNo, "")
	waitReader(t, "sockio.(*Conn).ReadReady")
}
