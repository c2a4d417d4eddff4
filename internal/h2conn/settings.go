package h2conn

import (
	"math"

	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// unlimitedStreams is the MaxConcurrentStreams value that means no limit.
const unlimitedStreams = math.MaxUint32

// queueInitialSettingsLocked queues our SETTINGS and, when our connection
// window is above the default, the WINDOW_UPDATE that opens it.
func (c *Conn) queueInitialSettingsLocked() {
	r := c.rareLocked()
	s := r.localSettings[:0]
	if c.role == RoleClient {
		s = append(s, h2frame.Setting{ID: h2frame.SettingEnablePush, Val: 0})
	} else if c.cfg.MaxConcurrentStreams != unlimitedStreams {
		// An absent SETTINGS_MAX_CONCURRENT_STREAMS means no limit (RFC
		// 9113 §6.5.2); grpc-go's server leaves it out in that case too.
		s = append(s, h2frame.Setting{ID: h2frame.SettingMaxConcurrentStreams, Val: c.cfg.MaxConcurrentStreams})
	}
	if c.cfg.InitialStreamWindow != h2frame.DefaultInitialWindow {
		s = append(s, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Val: c.cfg.InitialStreamWindow})
	}
	if c.cfg.MaxFrameSize != h2frame.MinMaxFrameSize {
		s = append(s, h2frame.Setting{ID: h2frame.SettingMaxFrameSize, Val: c.cfg.MaxFrameSize})
	}
	if c.cfg.HeaderTableSize != h2frame.DefaultHeaderTableLen {
		s = append(s, h2frame.Setting{ID: h2frame.SettingHeaderTableSize, Val: c.cfg.HeaderTableSize})
	}
	s = append(s, h2frame.Setting{ID: h2frame.SettingMaxHeaderListSize, Val: c.cfg.MaxHeaderListSize})
	r.localSettings = s
	c.queueCtrlLocked(ctrlFrame{kind: ctrlSettings}, false)
	if inc := c.connWindow - h2frame.DefaultInitialWindow; inc > 0 {
		c.queueCtrlLocked(ctrlFrame{kind: ctrlWindowUpdate, id: 0, val: inc}, false)
	}
}

// onSettings applies the peer's SETTINGS (RFC 9113 §6.5) or records the ACK
// of ours.
func (c *Conn) onSettings(f *h2frame.SettingsFrame) *Error {
	if !f.IsAck() {
		if err := c.countSettings(); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.IsAck() {
		if !c.settingsAcked {
			c.settingsAcked = true
			if c.timers.settings != nil {
				c.timers.settings.Stop()
				c.timers.settings = nil // its memory goes with it
			}
			if w := c.streamWindow.Load(); w < h2frame.DefaultInitialWindow {
				// Our smaller INITIAL_WINDOW_SIZE is now in force for the
				// streams opened under the default (§6.9.2).
				delta := int64(w) - h2frame.DefaultInitialWindow
				for _, s := range c.streams {
					s.rmu.Lock()
					s.in.avail += delta
					s.rmu.Unlock()
				}
			}
		}
		return nil
	}
	for _, st := range f.Settings {
		if err := c.applySettingLocked(st); err != nil {
			return err
		}
	}
	c.queueCtrlLocked(ctrlFrame{kind: ctrlSettingsAck}, true)
	return c.ctrlQueueErrLocked()
}

// countSettings counts one SETTINGS frame of the peer against
// maxSettingsPerWindow. It ends the connection before the frame's ACK is
// queued, while the ACKs already written leave room for the GOAWAY.
func (c *Conn) countSettings() *Error {
	c.rollRateWindow()
	c.settingsCount++
	if c.settingsCount > maxSettingsPerWindow {
		return connErr(h2frame.ErrCodeEnhanceYourCalm, "settings_flood")
	}
	return nil
}

func (c *Conn) applySettingLocked(st h2frame.Setting) *Error {
	v := st.Val
	switch st.ID {
	case h2frame.SettingHeaderTableSize:
		c.peer.headerTableSize = v
	case h2frame.SettingEnablePush:
		if c.role == RoleClient && v != 0 {
			return connErr(h2frame.ErrCodeProtocol, "server_enabled_push")
		}
		c.peer.enablePush = v
	case h2frame.SettingMaxConcurrentStreams:
		c.peer.maxConcurrentStreams = v
		c.wakeSlotLocked()
	case h2frame.SettingInitialWindowSize:
		if v > h2frame.MaxWindowSize {
			return connErr(h2frame.ErrCodeFlowControl, "settings_initial_window")
		}
		// §6.9.2: the change applies to every open stream's send window.
		delta := int64(v) - int64(c.peer.initialWindowSize)
		c.peer.initialWindowSize = v
		for _, s := range c.streams {
			if !s.out.add(delta) {
				return connErr(h2frame.ErrCodeFlowControl, "settings_window_overflow")
			}
			if delta > 0 && s.slot.pending() && !s.inReady {
				c.readyLocked(s)
			}
		}
	case h2frame.SettingMaxFrameSize:
		if v < h2frame.MinMaxFrameSize || v > h2frame.MaxMaxFrameSize {
			return connErr(h2frame.ErrCodeProtocol, "settings_max_frame_size")
		}
		c.peer.maxFrameSize = v
		c.wantWrite = c.wantWrite || c.ready.n > 0
	case h2frame.SettingMaxHeaderListSize:
		c.peer.maxHeaderListSize = v
	}
	// Unknown settings are ignored (§6.5.2).
	return nil
}

// PeerSetting returns the value of the peer's SETTINGS parameter id as last
// received, or the RFC default before the peer sent one.
//
// peerSetting returns the peer's value for id.
func (c *Conn) PeerSetting(id h2frame.SettingID) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch id {
	case h2frame.SettingHeaderTableSize:
		return c.peer.headerTableSize
	case h2frame.SettingEnablePush:
		return c.peer.enablePush
	case h2frame.SettingMaxConcurrentStreams:
		return c.peer.maxConcurrentStreams
	case h2frame.SettingInitialWindowSize:
		return c.peer.initialWindowSize
	case h2frame.SettingMaxFrameSize:
		return c.peer.maxFrameSize
	case h2frame.SettingMaxHeaderListSize:
		return c.peer.maxHeaderListSize
	}
	return 0
}

// growWindowsLocked raises our SETTINGS_INITIAL_WINDOW_SIZE to w (BDP
// estimate): open streams get the delta at once, new ones the new value,
// and the connection window follows so that it stays at least twice the
// streams'.
func (c *Conn) growWindowsLocked(w uint32) {
	old := c.streamWindow.Load()
	if w <= old {
		return
	}
	if cw := min(2*int64(w), h2frame.MaxWindowSize); cw > int64(c.connWindow) {
		inc := uint32(cw) - c.connWindow
		c.connWindow = uint32(cw)
		c.inflow.avail += int64(inc)
		c.queueCtrlLocked(ctrlFrame{kind: ctrlWindowUpdate, id: 0, val: inc}, false)
	}
	delta := int64(w - old)
	c.streamWindow.Store(w)
	for _, s := range c.streams {
		s.rmu.Lock()
		s.in.avail = min(s.in.avail+delta, h2frame.MaxWindowSize)
		s.rmu.Unlock()
	}
	c.queueSettingLocked(h2frame.SettingInitialWindowSize, w)
}

// queueSettingLocked sends one of our settings in a SETTINGS frame: in the
// one already queued and not yet written, if there is one (the writer sends
// c.rare.localSettings when it gets to it, so a second frame queued meanwhile
// would repeat the same list and the first change would be lost), else in
// a new one.
func (c *Conn) queueSettingLocked(id h2frame.SettingID, val uint32) {
	r := c.rareLocked()
	for _, f := range c.ctrl {
		if f.kind == ctrlSettings {
			for i := range r.localSettings {
				if r.localSettings[i].ID == id {
					r.localSettings[i].Val = val
					return
				}
			}
			r.localSettings = append(r.localSettings, h2frame.Setting{ID: id, Val: val})
			return
		}
	}
	r.localSettings = append(r.localSettings[:0], h2frame.Setting{ID: id, Val: val})
	c.queueCtrlLocked(ctrlFrame{kind: ctrlSettings}, false)
}

// RaiseMaxFrameSize announces a larger SETTINGS_MAX_FRAME_SIZE, n (at most
// 2^24-1), in a SETTINGS frame of its own; a smaller or equal n does
// nothing. The frame reader accepts the larger frames at once, since the
// peer may use them as soon as it reads the SETTINGS. It must be called on
// the reading goroutine, as Handler.HandleStream is.
//
// A server announces the RFC's 16 KiB at first (what h2spec and plain
// HTTP/2 peers expect) and raises it once a connection shows it carries
// gRPC, so that a client streaming large messages sends them in large
// DATA frames that the reader lands straight in the message's buffer.
func (c *Conn) RaiseMaxFrameSize(n uint32) {
	n = min(n, h2frame.MaxMaxFrameSize)
	if n <= c.fr.MaxFrameSize() {
		return
	}
	c.fr.SetMaxFrameSize(n)
	c.mu.Lock()
	if !c.closing {
		// Written with whatever goes out next (the reader kicks the
		// writer when it has parsed what it read).
		c.queueSettingLocked(h2frame.SettingMaxFrameSize, n)
	}
	c.mu.Unlock()
}
