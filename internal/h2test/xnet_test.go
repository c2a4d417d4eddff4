package h2test_test

import (
	"io"
	"log"
	"net/http"
	"testing"
	"testing/synctest"

	"golang.org/x/net/http2"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// TestPeerAgainstXNet drives x/net's HTTP/2 server, a conformant reference,
// with the scripted peer: a request, a PING, then a connection error.
func TestPeerAgainstXNet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h2test.CheckGoroutines(t)
		cc, sc := h2test.Pipe(h2test.PipeConfig{ChopReads: h2test.ChopRandom, Capacity: 512, Seed: 5})
		defer cc.Close()
		srv := &http2.Server{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeConn(sc, &http2.ServeConnOpts{
				BaseConfig: &http.Server{ErrorLog: log.New(io.Discard, "", 0)},
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					w.Header().Set("x-len", string(rune('0'+len(b))))
					w.Write([]byte("pong"))
				}),
			})
		}()
		p := h2test.NewPeer(t, cc, h2test.ClientRole)
		p.Decoder = newXDecoder()
		p.Greet()
		p.WriteHeaders(1, false, ":method", "POST", ":scheme", "http", ":path", "/", ":authority", "x")
		p.WriteData(1, true, []byte("abc"))
		h := p.WantHeaders(1)
		if h.Get(":status") != "200" || h.Get("x-len") != "3" {
			t.Fatalf("response:\n%s", h2test.FormatFields(h.Fields))
		}
		if body, _ := p.WantBodyTrailers(1, true); string(body) != "pong" {
			t.Fatalf("body %q", body)
		}
		p.WritePing([8]byte{7})
		p.WantPingAck([8]byte{7})
		p.WriteRaw(h2frame.TypeData, 0, 0, []byte("x"))
		p.WantGoAway(h2frame.ErrCodeProtocol)
		p.WantClosed()
		<-done
	})
}
