package h2conn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// A stream that watches a cancel channel is reset with CANCEL by the call
// waiting on it (RecvHeaders, Recv, a WriteData waiting for window) once
// the channel closes; the server sees the reset.
func TestWatchCanceled(t *testing.T) {
	serverSaw := make(chan error, 4)
	p := newPair(t, Config{InitialStreamWindow: 1 << 10}, Config{InitialStreamWindow: 1 << 10}, func(pool *bufpool.Pool) Handler {
		return HandlerFunc(func(s *Stream) {
			go func() {
				if s.Headers()[2].Value == "/respond" {
					// Headers, then nothing: the client waits in Recv.
					s.Send(HeadersItem([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false))
				}
				<-s.Done()
				serverSaw <- s.Err()
				s.Release()
			}()
		})
	}, false)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		path string
		wait func(s *Stream) error
	}{
		{"RecvHeaders", "/silent", func(s *Stream) error { _, _, err := s.RecvHeaders(); return err }},
		{"Recv", "/respond", func(s *Stream) error {
			if _, _, err := s.RecvHeaders(); err != nil {
				return err
			}
			_, err := s.Recv()
			return err
		}},
		{"RecvInto", "/respond", func(s *Stream) error {
			if _, _, err := s.RecvHeaders(); err != nil {
				return err
			}
			// A range without a buffer: the wait for its first bytes.
			b, _, err := s.RecvInto(nil, 0, 64<<10)
			if b != nil {
				b.Free()
			}
			return err
		}},
		{"WriteData", "/silent", func(s *Stream) error {
			// More than the 1 KiB window: the write waits for WINDOW_UPDATE.
			return s.Send(DataItem(p.pool.Copy(make([]byte, 4<<10)), false))
		}},
	} {
		var s *Stream
		var err error
		if tc.name == "RecvHeaders" {
			// A unary call: held headers (the wait flushes them) and
			// the context's Done watched.
			cctx, cancel := context.WithCancel(ctx)
			s, err = p.client.NewStream(cctx, reqFields(tc.path), StreamOptions{Unary: true, Canceled: cctx.Done(), WatchCanceled: true})
			time.AfterFunc(20*time.Millisecond, cancel)
		} else {
			done := make(chan struct{})
			s, err = p.client.NewStream(ctx, reqFields(tc.path), StreamOptions{Canceled: done, WatchCanceled: true})
			time.AfterFunc(20*time.Millisecond, func() { close(done) })
		}
		if err != nil {
			t.Fatal(err)
		}
		err = tc.wait(s)
		var he *Error
		if !errors.As(err, &he) || he.Code != h2frame.ErrCodeCancel || he.Initiator != InitiatorUser {
			t.Errorf("%s: %v, want the user's CANCEL reset", tc.name, err)
		}
		select {
		case err := <-serverSaw:
			if !errors.As(err, &he) || he.Code != h2frame.ErrCodeCancel || he.Initiator != InitiatorPeer {
				t.Errorf("%s: server saw %v, want the peer's CANCEL", tc.name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the server did not see the reset", tc.name)
		}
		s.Release()
	}
	p.close(t)
}
