//go:build linux && !leangrpcportable

package sockio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// pollerFailureChild marks the child process in which
// TestIdlePollerFailure breaks the process-wide idle poller, which the
// other tests of the package need working.
const pollerFailureChild = "SOCKIO_TEST_POLLER_FAILURE_CHILD"

// When the idle poller's wait fails, the process goes on: each waiting
// conn's callback runs (its reader reads again and finds its bytes),
// OnReadable reports the failure from then on, the conns still read and
// close, and the failure is logged once.
func TestIdlePollerFailure(t *testing.T) {
	if os.Getenv(pollerFailureChild) == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestIdlePollerFailure$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), pollerFailureChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if n := strings.Count(string(out), "idle poller failed"); n != 1 {
			t.Fatalf("the failure was logged %d times, want once:\n%s", n, out)
		}
		return
	}

	if err := StartIdlePoller(); err != nil {
		t.Fatal(err)
	}
	pool := bufpool.New(nil)
	const n = 3
	clients := make([]io.Writer, n)
	conns := make([]*Conn, n)
	fired := make([]chan struct{}, n)
	for i := range n {
		client, server := tcpPair(t)
		clients[i], conns[i], fired[i] = client, Wrap(server, true).(*Conn), make(chan struct{})
		if err := conns[i].OnReadable(func() { close(fired[i]) }); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing in the process closes the epoll descriptor but this.
	idle.mu.Lock()
	f := idle.file
	idle.mu.Unlock()
	f.Close()

	for i := range n {
		select {
		case <-fired[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("conn %d: its callback did not run after the poller failed", i)
		}
	}
	for i, c := range conns {
		if err := c.OnReadable(func() { t.Errorf("conn %d: a callback ran after the poller failed", i) }); err == nil {
			t.Fatalf("conn %d: OnReadable after the poller failed returned nil", i)
		}
		msg := []byte{'x', byte(i)}
		if _, err := clients[i].Write(msg); err != nil {
			t.Fatal(err)
		}
		b, err := c.ReadReady(pool, 64)
		if err != nil || !bytes.Equal(b.Bytes(), msg) {
			t.Fatalf("conn %d: ReadReady after the failure = %v, %v", i, b, err)
		}
		b.Free()
		if err := c.Close(); err != nil {
			t.Fatalf("conn %d: Close: %v", i, err)
		}
		if _, err := c.ReadReady(pool, 64); err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("conn %d: ReadReady after Close = %v, want the closed-conn error", i, err)
		}
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("%d pooled buffers out", n)
	}
}
