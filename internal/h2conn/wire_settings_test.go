package h2conn_test

import (
	"math"
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// RFC 9113 §6.5.2: SETTINGS_MAX_CONCURRENT_STREAMS left out means no
// limit. A server configured without one leaves it out, as grpc-go does,
// instead of advertising 2^32-1 (which h2spec then tries to exceed).
func TestWireUnlimitedStreamsNotAdvertised(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		st := newServerTest(t, h2conn.Config{MaxConcurrentStreams: math.MaxUint32}, wireOpts{})
		st.greet()
		if v, ok := st.peer.RemoteSettings[h2frame.SettingMaxConcurrentStreams]; ok {
			t.Errorf("server advertised MAX_CONCURRENT_STREAMS=%d; want it left out", v)
		}
		st.peer.WantNothing(quiet)
	})
}
