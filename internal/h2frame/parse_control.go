package h2frame

import "encoding/binary"

// Parsers of the fixed-layout frames. Each gets the whole payload, already
// consumed from the source, and returns the Reader's reused frame value.

func (r *Reader) parsePriority(h FrameHeader, p []byte) (Frame, error) {
	if h.StreamID == 0 {
		return nil, ConnError{ErrCodeProtocol, "priority_stream_0"}
	}
	if len(p) != 5 {
		return nil, StreamError{h.StreamID, ErrCodeFrameSize, "priority_length"}
	}
	f := &r.pf
	f.FrameHeader = h
	f.Priority = readPriority(p)
	if f.StreamDep == h.StreamID {
		return nil, StreamError{h.StreamID, ErrCodeProtocol, "priority_self_dependency"}
	}
	return f, nil
}

// readPriority parses the 5-byte priority block of HEADERS and PRIORITY.
func readPriority(p []byte) Priority {
	v := binary.BigEndian.Uint32(p)
	return Priority{StreamDep: v & (1<<31 - 1), Exclusive: v>>31 == 1, Weight: p[4]}
}

func (r *Reader) parseRSTStream(h FrameHeader, p []byte) (Frame, error) {
	if h.StreamID == 0 {
		return nil, ConnError{ErrCodeProtocol, "rst_stream_0"}
	}
	if len(p) != 4 {
		return nil, ConnError{ErrCodeFrameSize, "rst_length"}
	}
	f := &r.rf
	f.FrameHeader = h
	f.Code = ErrCode(binary.BigEndian.Uint32(p))
	return f, nil
}

func (r *Reader) parseSettings(h FrameHeader, p []byte) (Frame, error) {
	if h.StreamID != 0 {
		return nil, ConnError{ErrCodeProtocol, "settings_stream_nonzero"}
	}
	if h.Flags.Has(FlagAck) && len(p) != 0 {
		return nil, ConnError{ErrCodeFrameSize, "settings_ack_payload"}
	}
	if len(p)%6 != 0 {
		return nil, ConnError{ErrCodeFrameSize, "settings_length"}
	}
	if len(p)/6 > MaxSettingsPerFrame {
		return nil, ConnError{ErrCodeEnhanceYourCalm, "settings_too_many"}
	}
	f := &r.sf
	f.FrameHeader = h
	f.Settings = f.Settings[:0]
	for ; len(p) > 0; p = p[6:] {
		s := Setting{ID: SettingID(binary.BigEndian.Uint16(p)), Val: binary.BigEndian.Uint32(p[2:])}
		if err := s.Valid(); err != nil {
			return nil, err
		}
		f.Settings = append(f.Settings, s)
	}
	return f, nil
}

// Valid checks a setting's value against RFC 9113 §6.5.2 and returns the
// connection error a peer sending it commits, or nil.
func (s Setting) Valid() error {
	switch s.ID {
	case SettingEnablePush:
		if s.Val > 1 {
			return ConnError{ErrCodeProtocol, "settings_enable_push"}
		}
	case SettingInitialWindowSize:
		if s.Val > MaxWindowSize {
			return ConnError{ErrCodeFlowControl, "settings_initial_window"}
		}
	case SettingMaxFrameSize:
		if s.Val < MinMaxFrameSize || s.Val > MaxMaxFrameSize {
			return ConnError{ErrCodeProtocol, "settings_max_frame_size"}
		}
	}
	return nil
}

func (r *Reader) parsePing(h FrameHeader, p []byte) (Frame, error) {
	if h.StreamID != 0 {
		return nil, ConnError{ErrCodeProtocol, "ping_stream_nonzero"}
	}
	if len(p) != 8 {
		return nil, ConnError{ErrCodeFrameSize, "ping_length"}
	}
	f := &r.pgf
	f.FrameHeader = h
	copy(f.Data[:], p)
	return f, nil
}

func (r *Reader) parseGoAway(h FrameHeader, p []byte) (Frame, error) {
	if h.StreamID != 0 {
		return nil, ConnError{ErrCodeProtocol, "goaway_stream_nonzero"}
	}
	if len(p) < 8 {
		return nil, ConnError{ErrCodeFrameSize, "goaway_length"}
	}
	f := &r.gf
	f.FrameHeader = h
	f.LastStreamID = binary.BigEndian.Uint32(p) & (1<<31 - 1)
	f.Code = ErrCode(binary.BigEndian.Uint32(p[4:]))
	// The read buffer may go back to the pool before the caller looks at
	// the debug data: keep a copy the Reader owns.
	if cap(f.Debug) > maxRetainedScratch {
		f.Debug = nil
	}
	f.Debug = append(f.Debug[:0], p[8:]...)
	return f, nil
}

func (r *Reader) parseWindowUpdate(h FrameHeader, p []byte) (Frame, error) {
	if len(p) != 4 {
		return nil, ConnError{ErrCodeFrameSize, "window_update_length"}
	}
	f := &r.wf
	f.FrameHeader = h
	f.Increment = binary.BigEndian.Uint32(p) & (1<<31 - 1)
	if f.Increment == 0 {
		if h.StreamID == 0 {
			return nil, ConnError{ErrCodeProtocol, "window_update_zero"}
		}
		return nil, StreamError{h.StreamID, ErrCodeProtocol, "window_update_zero"}
	}
	return f, nil
}
