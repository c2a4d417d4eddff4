package leangrpc_test

import (
	"testing"
	"time"

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

// TestGreetingNotAPreface: a greeting that is not a preface ends the
// connection when it comes, not at the preface timeout.
func TestGreetingNotAPreface(t *testing.T) {
	tg := attackTarget(t)
	c := tg.dial(t)
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	wantEnd(t, c, time.Second)
}
