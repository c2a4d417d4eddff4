package leangrpc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// A request that is not gRPC gets a plain HTTP answer (status, text/plain,
// a short body) and its stream stays open until the client ends its
// request: the response's END_STREAM follows the request's, with no reset.
func TestWireServerPlainAnswerWaitsForRequestEnd(t *testing.T) {
	p := scriptedClient(t)
	p.WriteHeaders(1, false, ":method", "POST", ":scheme", "http", ":path", "/", ":authority", "x")
	h := p.WantHeaders(1)
	if h.EndStream || h.Get(":status") != "415" || h.Get("content-type") != "text/plain; charset=utf-8" || h.Get("grpc-status") != "3" {
		t.Fatalf("want a 415 text/plain response without END_STREAM, got %s", h2test.FormatFields(h.Fields))
	}
	f := p.WantData(1)
	if f.EndStream() || !strings.Contains(string(f.Data()), "content-type") {
		t.Fatalf("body frame %v %q", f, f.Data())
	}
	p.WantNothing(100 * time.Millisecond) // the stream is still open
	p.WriteData(1, false, []byte("ignored"))
	p.WriteData(1, true, []byte("body"))
	if body := p.WantBody(1, false); len(body) != 0 {
		t.Fatalf("after the request ended: body %q, want an empty END_STREAM", body)
	}
	p.WantNothing(100 * time.Millisecond) // closed cleanly: no RST_STREAM

	// A request that ended with its HEADERS gets the whole answer at once.
	p.WriteHeaders(3, true, ":method", "GET", ":scheme", "http", ":path", "/", ":authority", "x")
	if h := p.WantHeaders(3); h.EndStream || h.Get(":status") != "415" {
		t.Fatalf("GET: %s", h2test.FormatFields(h.Fields))
	}
	if body := p.WantBody(3, false); !strings.HasSuffix(string(body), "\n") {
		t.Fatalf("GET body %q", body)
	}

	// The engine still checks the request's content-length.
	p.WriteHeaders(5, false, ":method", "POST", ":scheme", "http", ":path", "/", ":authority", "x", "content-length", "1")
	p.WriteData(5, true, []byte("test"))
	for {
		f := p.WantOneOf(h2frame.TypeHeaders, h2frame.TypeData, h2frame.TypeRSTStream)
		if f.Type == h2frame.TypeRSTStream {
			if f.StreamID != 5 || f.ErrCode() != h2frame.ErrCodeProtocol {
				t.Fatalf("got %v, want RST_STREAM PROTOCOL_ERROR on stream 5", f)
			}
			break
		}
	}
}
