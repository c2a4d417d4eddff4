package h2conn

import (
	"net"
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// Settings from the peer: INITIAL_WINDOW_SIZE applies the delta to open
// streams' send windows (§6.9.2) and overflow is FLOW_CONTROL_ERROR.
func TestApplySettings(t *testing.T) {
	cn, sn := net.Pipe()
	defer cn.Close()
	defer sn.Close()
	c := newConn(sn, Config{}, RoleServer, nil)
	defer c.fw.Close()
	defer c.fr.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.newStreamLocked(1, false)
	s.state = stateOpen
	s.out.take(1000) // 64535 left
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 100}); err != nil {
		t.Fatal(err)
	}
	if s.out.n != 100-1000 {
		t.Fatalf("window after decrease %d, want -900", s.out.n)
	}
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if s.out.n != 1<<20-1000 {
		t.Fatalf("window after increase %d", s.out.n)
	}
	s.out.n = h2frame.MaxWindowSize - 10
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: 1<<20 + 11}); err == nil || err.Code != h2frame.ErrCodeFlowControl {
		t.Fatalf("overflow: %v", err)
	}
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingMaxConcurrentStreams, Val: 7}); err != nil || c.peer.maxConcurrentStreams != 7 {
		t.Fatal("MAX_CONCURRENT_STREAMS not recorded")
	}
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingMaxFrameSize, Val: 1 << 20}); err != nil || c.peer.maxFrameSize != 1<<20 {
		t.Fatal("MAX_FRAME_SIZE not recorded")
	}
	if err := c.applySettingLocked(h2frame.Setting{ID: 0x99, Val: 1}); err != nil {
		t.Fatal("unknown setting refused")
	}
	c.role = RoleClient
	if err := c.applySettingLocked(h2frame.Setting{ID: h2frame.SettingEnablePush, Val: 1}); err == nil || err.Code != h2frame.ErrCodeProtocol {
		t.Fatal("server enabling push accepted by a client")
	}
}
