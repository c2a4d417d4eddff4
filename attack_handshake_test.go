package leangrpc_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
)

// stalledConns opens n connections of each slowloris kind: nothing sent,
// half the preface, the preface and half the first SETTINGS frame's header.
func stalledConns(t *testing.T, tg *target, n int) []*h2test.Peer {
	t.Helper()
	var peers []*h2test.Peer
	settings := h2test.AppendFrame(nil, h2frame.TypeSettings, 0, 0, nil)
	for _, sent := range []string{"", h2test.ClientPreface[:12], h2test.ClientPreface + string(settings[:4])} {
		for range n {
			p := h2test.NewPeer(t, tg.dial(t), h2test.ClientRole)
			if sent != "" {
				p.WriteBytes([]byte(sent))
			}
			peers = append(peers, p)
		}
	}
	return peers
}

// TestAttackStalledHandshake: slowloris, connections that stop before the
// preface and first SETTINGS are complete. Each is closed once
// ConnectionTimeout has passed since it was accepted.
func TestAttackStalledHandshake(t *testing.T) {
	const timeout = time.Second
	tg := attackTarget(t, leangrpc.ConnectionTimeout(timeout))
	for _, p := range stalledConns(t, tg, 16) {
		wantEnd(t, p.Conn, timeout+2*time.Second)
	}
	tg.legit(t)
}

// TestAttackStalledHandshakeHoldsNoGoroutine: on the Linux socket path a
// connection that has sent part of its preface is waited for by the idle
// machinery: no goroutine per connection.
func TestAttackStalledHandshakeHoldsNoGoroutine(t *testing.T) {
	if sockio.StartIdlePoller() != nil {
		t.Skip("the portable socket path keeps a reader per connection")
	}
	missingDefence(t, "the idle machinery applied from the first byte (a connection waits for its preface on a goroutine)")
	tg := attackTarget(t)
	base := runtime.NumGoroutine()
	const n = 64
	stalledConns(t, tg, n)
	time.Sleep(200 * time.Millisecond) // the server accepts and reads what came
	if grown := runtime.NumGoroutine() - base; grown > n/4 {
		t.Errorf("%d stalled connections hold %d goroutines", 3*n, grown)
	}
	tg.legit(t)
}

// TestAttackStalledInFrame: a greeted peer that stops inside a frame (half
// a frame header, or half a payload) is closed after a bound; here the test
// shortens it with ConnectionTimeout.
func TestAttackStalledInFrame(t *testing.T) {
	missingDefence(t, "a bound on a peer stalled inside a frame")
	const timeout = time.Second
	tg := attackTarget(t, leangrpc.ConnectionTimeout(timeout))
	ping := h2test.AppendFrame(nil, h2frame.TypePing, 0, 0, make([]byte, 8))
	for _, part := range [][]byte{ping[:4], ping[:12]} {
		p := tg.peer(t)
		p.WriteBytes(part)
		wantEnd(t, p.Conn, timeout+2*time.Second)
	}
	tg.legit(t)
}
