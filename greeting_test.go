package leangrpc_test

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// greetingBytes is a client's preface and first SETTINGS frame carrying n
// settings.
func greetingBytes(n int) []byte {
	var payload []byte
	for range n {
		payload = append(payload, 0, byte(h2frame.SettingEnablePush), 0, 0, 0, 0)
	}
	return h2test.AppendFrame([]byte(h2test.ClientPreface), h2frame.TypeSettings, 0, 0, payload)
}

// TestGreetingInParts: a client whose preface and first SETTINGS arrive in
// parts, with pauses long enough for the server to wait for the rest in
// the idle poller, is served; so is one whose first SETTINGS is longer
// than the server keeps between those waits.
func TestGreetingInParts(t *testing.T) {
	for _, settings := range []int{2, 40} {
		tg := attackTarget(t)
		p := h2test.NewPeer(t, tg.dial(t), h2test.ClientRole)
		p.Timeout = attackWait
		g := greetingBytes(settings)
		for i := 0; i < len(g); i += 7 {
			p.WriteBytes(g[i:min(i+7, len(g))])
			time.Sleep(5 * time.Millisecond)
		}
		p.WantSettings()
		p.WriteSettingsAck()
		for f := p.WantFrame(h2frame.TypeSettings); !f.IsAck(); f = p.WantFrame(h2frame.TypeSettings) {
		}
		p.WriteHeadersBlock(1, h2frame.FlagEndHeaders, requestBlock(unaryPath))
		p.WriteData(1, true, unaryRequest(10))
		if h := p.WantHeaders(1); h.Get(":status") != "200" {
			t.Fatalf("%d settings in parts: status %q", settings, h.Get(":status"))
		}
		p.WantBodyTrailers(1, true)
	}
}

// TestGreetingNotAPreface: with the web protocols off, a greeting that is
// not a preface ends the connection when it comes, not at the preface
// timeout; with them on, an HTTP/1.1 request gets net/http's answer, and
// bytes that are neither end the connection as a bad preface.
func TestGreetingNotAPreface(t *testing.T) {
	tg := attackTarget(t, leangrpc.WebProtocols(false))
	c := tg.dial(t)
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	wantEnd(t, c, time.Second)

	tg = attackTarget(t)
	c = tg.dial(t)
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 415") {
		t.Errorf("HTTP/1.1 request answered %q, %v; want HTTP/1.1 415", line, err)
	}
	c = tg.dial(t)
	c.Write([]byte("\x16\x03\x01\x00\x05hello, these bytes are no HTTP\r\n\r\n"))
	wantEnd(t, c, 5*time.Second)
}

// TestPlainAnswerEndsWithoutRequestEnd: a request that is no call gets
// its plain HTTP answer in full even when the client, seeing the error
// status, stops sending its body (as Go's HTTP/2 transport does): the
// server ends the response once the client has been silent a moment,
// not when its ten-second drain bound passes.
func TestPlainAnswerEndsWithoutRequestEnd(t *testing.T) {
	tg := attackTarget(t)
	p := h2test.NewPeer(t, tg.dial(t), h2test.ClientRole)
	p.Timeout = attackWait
	p.Greet()
	p.WriteHeaders(1, false, ":method", "POST", ":scheme", "http", ":path", "/x/y", ":authority", "a", "content-type", "text/plain")
	start := time.Now()
	if h := p.WantHeaders(1); h.Get(":status") != "415" {
		t.Fatalf("status %q", h.Get(":status"))
	}
	p.WantBody(1, true) // to the response's END_STREAM
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the answer ended after %v", d)
	}
}
