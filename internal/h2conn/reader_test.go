package h2conn

import (
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// Close of a client whose role is offered ends the connection at once: Close
// starts a reader, which finds the closed socket and finishes.
func TestOfferedRoleClose(t *testing.T) {
	p, g := newOfferingPair(t)
	roundTrip(t, p.client, p.pool, []byte("x"))
	p.client.Close()
	select {
	case <-p.client.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Close of a client with an offered role did not end it")
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// The caller that reads for itself dispatches whatever the batch holds, and
// hands the role to a reader goroutine once more than one stream is open:
// many calls on one connection from several goroutines all complete, with
// nothing left behind.
func TestOfferedRoleConcurrentCallers(t *testing.T) {
	p, g := newOfferingPair(t)
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				// One goroutine calls alone now and then: the role goes
				// back and forth between offered and a reader goroutine.
				if w > 0 && i%50 == 0 {
					time.Sleep(3 * time.Millisecond)
				}
				msg := []byte{byte(w), byte(i)}
				if got := roundTrip(t, p.client, p.pool, msg); string(got) != string(msg) {
					t.Errorf("worker %d call %d: got %q", w, i, got)
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	p.close(t)
	checkLeaks(t, p.pool, g)
}

// newOfferingPair is an echo pair over TCP, whose connections offer their
// read role where the platform allows it, and the goroutine count before it.
func newOfferingPair(t *testing.T) (*pair, int) {
	g := runtime.NumGoroutine()
	return newPair(t, Config{}, Config{}, func(pool *bufpool.Pool) Handler { return echoHandler(t, pool) }, true), g
}

// inlineFunc runs a func as an InlineHandler.
type inlineFunc func()

func (f inlineFunc) ServeInline() { f() }

// inlineEchoHandler is echoHandler run through RunInline (on the reader
// when the call is alone on its connection); a stream of path /block
// first signals started and waits for release.
func inlineEchoHandler(pool *bufpool.Pool, started, release chan struct{}) Handler {
	return HandlerFunc(func(s *Stream) {
		block := false
		for _, f := range s.Headers() {
			block = block || f.Name == ":path" && f.Value == "/block"
		}
		fn := func() {
			got, err := recvAll(s)
			if err != nil {
				return
			}
			if block {
				started <- struct{}{}
				<-release
			}
			// One flush for the response, as grpcwire's unary answer.
			if err := s.Send(holding(HeadersItem(respFields, false), true)); err != nil {
				return
			}
			if err := s.Send(holding(DataItem(pool.Copy(got), false), true)); err != nil {
				return
			}
			s.Send(TrailersItem(trailerFields))
		}
		if !s.RunInline(inlineFunc(fn)) {
			go fn()
		}
	})
}
