package leangrpc

import (
	"testing"
	"time"

	"google.golang.org/grpc/keepalive"
)

// TestKeepaliveTimeFloor: WithKeepaliveParams raises a Time under 10 s,
// zero included, to 10 s, as grpc-go's does, and keeps the rest.
func TestKeepaliveTimeFloor(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, 10 * time.Second},
		{time.Millisecond, 10 * time.Second},
		{9 * time.Second, 10 * time.Second},
		{10 * time.Second, 10 * time.Second},
		{time.Minute, time.Minute},
	} {
		var o dialOptions
		WithKeepaliveParams(keepalive.ClientParameters{Time: tc.in, Timeout: 3 * time.Second, PermitWithoutStream: true}).applyDial(&o)
		if o.kp.Time != tc.want || o.kp.Timeout != 3*time.Second || !o.kp.PermitWithoutStream {
			t.Errorf("WithKeepaliveParams(Time %v) = %+v, want Time %v and the rest kept", tc.in, o.kp, tc.want)
		}
	}
}

// TestServerKeepaliveTimeFloor: KeepaliveParams raises a ping Time under
// 1 s to 1 s, as grpc-go's does; zero (no pings) stays zero.
func TestServerKeepaliveTimeFloor(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, 0},
		{time.Millisecond, time.Second},
		{999 * time.Millisecond, time.Second},
		{time.Second, time.Second},
		{time.Minute, time.Minute},
	} {
		var o serverOptions
		KeepaliveParams(keepalive.ServerParameters{Time: tc.in, Timeout: 3 * time.Second, MaxConnectionIdle: time.Hour}).applyServer(&o)
		if o.kp.Time != tc.want || o.kp.Timeout != 3*time.Second || o.kp.MaxConnectionIdle != time.Hour {
			t.Errorf("KeepaliveParams(Time %v) = %+v, want Time %v and the rest kept", tc.in, o.kp, tc.want)
		}
	}
}
