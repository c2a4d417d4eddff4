package h2conn_test

import (
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// A server connection that ended is not kept reachable by its preface
// deadline's timer: a client reconnecting hundreds of times a second would
// otherwise make the server hold every connection of the last
// PrefaceTimeout, with its buffers and streams.
func TestEndedConnNotHeldByPrefaceTimer(t *testing.T) {
	nc, pc := h2test.Pipe(h2test.PipeConfig{})
	conn := h2conn.NewServerConn(nc, h2conn.Config{PrefaceTimeout: time.Hour}, h2conn.HandlerFunc(func(s *h2conn.Stream) { s.Release() }))
	collected := make(chan struct{})
	runtime.AddCleanup(conn, func(ch chan struct{}) { close(ch) }, collected)
	served := make(chan error, 1)
	go func() { served <- conn.Serve() }()
	var b [9]byte
	if _, err := io.ReadFull(pc, b[:]); err != nil { // the server's SETTINGS: its timers run
		t.Fatal(err)
	}
	conn.Close()
	pc.Close()
	<-served
	conn = nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		select {
		case <-collected:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("an ended server connection is still reachable 5 s later (its preface timer runs for an hour)")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
