package h2conn_test

import (
	"context"
	"math"
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
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

// RFC 9113 §6.5.2: a server whose first SETTINGS leaves out
// MAX_CONCURRENT_STREAMS sets no limit; the client's assumption of 100 for
// the time before those SETTINGS must not outlive them.
func TestWireClientNoServerStreamLimit(t *testing.T) {
	wireRun(t, func(t *testing.T) {
		ct := newClientTest(t, h2conn.Config{}, wireOpts{})
		p := ct.peer
		p.Greet()
		const n = 120
		for i := 0; i < n; i++ {
			s, err := ct.conn.NewStream(context.Background(), h2test.Fields(reqFields("/svc/M")...), h2conn.StreamOptions{})
			if err != nil {
				t.Fatalf("NewStream %d: %v", i, err)
			}
			defer s.Release()
		}
		for i := 0; i < n; i++ {
			p.WantHeaders(uint32(2*i + 1))
		}
		if got := ct.conn.PeerSetting(h2frame.SettingMaxConcurrentStreams); got != math.MaxUint32 {
			t.Errorf("PeerSetting(MAX_CONCURRENT_STREAMS) = %d; want unlimited", got)
		}
	})
}
