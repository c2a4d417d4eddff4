package h2conn

import (
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2frame"
)

func TestStateTransitions(t *testing.T) {
	type ev func(streamState) (streamState, error)
	sendH := func(end bool) ev { return func(s streamState) (streamState, error) { return s.sendHeaders(end) } }
	recvH := func(end bool) ev { return func(s streamState) (streamState, error) { return s.recvHeaders(end) } }
	sendD := func(end bool) ev { return func(s streamState) (streamState, error) { return s.sendData(end) } }
	recvD := func(end bool) ev { return func(s streamState) (streamState, error) { return s.recvData(end) } }
	recvR := func(s streamState) (streamState, error) { return s.recvReset() }
	for _, tc := range []struct {
		name    string
		from    streamState
		ev      ev
		to      streamState
		wantErr error
	}{
		{"idle send H", stateIdle, sendH(false), stateOpen, nil},
		{"idle send H+ES", stateIdle, sendH(true), stateHalfClosedLocal, nil},
		{"idle recv H", stateIdle, recvH(false), stateOpen, nil},
		{"idle recv H+ES", stateIdle, recvH(true), stateHalfClosedRemote, nil},
		{"idle recv DATA", stateIdle, recvD(false), stateIdle, errRecvIdle},
		{"idle recv RST", stateIdle, recvR, stateIdle, errRecvIdle},
		{"idle send DATA", stateIdle, sendD(false), stateIdle, errSendState},
		{"open send ES", stateOpen, sendD(true), stateHalfClosedLocal, nil},
		{"open recv ES", stateOpen, recvD(true), stateHalfClosedRemote, nil},
		{"open recv DATA", stateOpen, recvD(false), stateOpen, nil},
		{"open recv trailers", stateOpen, recvH(true), stateHalfClosedRemote, nil},
		{"open send trailers", stateOpen, sendH(true), stateHalfClosedLocal, nil},
		{"open recv RST", stateOpen, recvR, stateClosed, nil},
		{"hcl recv ES", stateHalfClosedLocal, recvD(true), stateClosed, nil},
		{"hcl recv H+ES", stateHalfClosedLocal, recvH(true), stateClosed, nil},
		{"hcl send DATA", stateHalfClosedLocal, sendD(false), stateHalfClosedLocal, errSendState},
		{"hcl send H", stateHalfClosedLocal, sendH(true), stateHalfClosedLocal, errSendState},
		{"hcr send ES", stateHalfClosedRemote, sendD(true), stateClosed, nil},
		{"hcr send trailers", stateHalfClosedRemote, sendH(true), stateClosed, nil},
		{"hcr recv DATA", stateHalfClosedRemote, recvD(false), stateHalfClosedRemote, errRecvClosed},
		{"hcr recv H", stateHalfClosedRemote, recvH(true), stateHalfClosedRemote, errRecvClosed},
		{"hcr recv RST", stateHalfClosedRemote, recvR, stateClosed, nil},
		{"closed recv DATA", stateClosed, recvD(false), stateClosed, errRecvClosed},
		{"closed recv H", stateClosed, recvH(false), stateClosed, errRecvClosed},
		{"closed send DATA", stateClosed, sendD(true), stateClosed, errSendState},
		{"closed recv RST", stateClosed, recvR, stateClosed, nil},
	} {
		got, err := tc.ev(tc.from)
		if got != tc.to || err != tc.wantErr {
			t.Errorf("%s: got %v, %v; want %v, %v", tc.name, got, err, tc.to, tc.wantErr)
		}
	}
	if errRecvIdle.Code != h2frame.ErrCodeProtocol || !errRecvIdle.Conn {
		t.Error("frames on idle streams must be connection PROTOCOL_ERROR")
	}
	if errRecvClosed.Code != h2frame.ErrCodeStreamClosed || errRecvClosed.Conn {
		t.Error("frames on half-closed(remote) streams must be stream STREAM_CLOSED")
	}
	if stateIdle.recvWindowUpdate() == nil || stateOpen.recvWindowUpdate() != nil || stateClosed.recvWindowUpdate() != nil {
		t.Error("WINDOW_UPDATE allowed everywhere but idle")
	}
}

// The recently closed ring answers for the ids put in it, and only for
// them among nearby ids, also once it wrapped.
func TestRecentClosed(t *testing.T) {
	c := &Conn{}
	for _, id := range []uint32{1, 3, 5} {
		if c.wasClosedLocked(id) {
			t.Fatalf("empty ring: %d reported closed", id)
		}
	}
	for id := uint32(1); id < 2*recentClosedIDs+40; id += 2 {
		c.rememberClosedLocked(id, false)
	}
	last := uint32(2*recentClosedIDs + 39)
	for id := uint32(1); id <= last+200; id += 2 {
		want := id <= last && id > last-2*recentClosedIDs
		if got := c.wasClosedLocked(id); got != want {
			t.Fatalf("id %d: closed %v, want %v", id, got, want)
		}
	}
}
