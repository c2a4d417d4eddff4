package h2conn_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// arrivalLog records, in order, what a stream's ResetHandler and
// ArrivalHandler heard.
type arrivalLog struct {
	mu     sync.Mutex
	events []string
	fired  chan struct{}
}

func newArrivalLog() *arrivalLog { return &arrivalLog{fired: make(chan struct{}, 1)} }

func (l *arrivalLog) StreamReset(error) { l.add("reset") }
func (l *arrivalLog) RequestArrived() {
	l.add("arrived")
	l.fired <- struct{}{}
}

func (l *arrivalLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *arrivalLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// SetHandlers' arrival handler hears once of the request's first DATA frame, or
// of the stream's end after the reset hook; it is not registered when the
// request began already.
func TestSetHandlersAwaitsRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		act  func(st *serverTest, s *h2conn.Stream)
		want []string
	}{
		{"data", func(st *serverTest, s *h2conn.Stream) { st.peer.WriteData(1, false, []byte("x")) }, []string{"arrived"}},
		{"empty end", func(st *serverTest, s *h2conn.Stream) { st.peer.WriteData(1, true, nil) }, []string{"arrived"}},
		{"peer reset", func(st *serverTest, s *h2conn.Stream) { st.peer.WriteRST(1, h2frame.ErrCodeCancel) }, []string{"reset", "arrived"}},
		{"local reset", func(st *serverTest, s *h2conn.Stream) { s.Reset(h2frame.ErrCodeCancel) }, []string{"arrived"}},
		{"connection closed", func(st *serverTest, s *h2conn.Stream) { st.conn.Close() }, []string{"reset", "arrived"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wireRun(t, func(t *testing.T) {
				st := newServerTest(t, h2conn.Config{}, wireOpts{})
				st.greet()
				st.peer.WriteHeaders(1, false, reqFields("/")...)
				s := st.stream()
				defer s.Release()
				log := newArrivalLog()
				if !s.SetHandlers(log, log) {
					t.Fatal("SetHandlers refused to await a stream whose request had not begun")
				}
				tc.act(st, s)
				select {
				case <-log.fired:
				case <-time.After(5 * time.Second):
					t.Fatalf("handler not called; heard %v", log.get())
				}
				settle()
				if got := log.get(); !slices.Equal(got, tc.want) {
					t.Errorf("heard %v, want %v", got, tc.want)
				}
			})
		})
	}
	t.Run("begun", func(t *testing.T) {
		wireRun(t, func(t *testing.T) {
			st := newServerTest(t, h2conn.Config{}, wireOpts{})
			st.greet()
			st.peer.WriteHeaders(1, true, reqFields("/")...)
			s := st.stream()
			defer s.Release()
			if l := newArrivalLog(); s.SetHandlers(l, l) {
				t.Error("SetHandlers awaited a stream whose request had ended")
			}
		})
	})
}
