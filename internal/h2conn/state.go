package h2conn

import "github.com/leangrpc/leangrpc/internal/h2frame"

// streamState is a stream's place in the life cycle of RFC 9113 §5.1:
//
//	                         +--------+
//	                 send PP |        | recv PP
//	                ,--------+  idle  +--------.
//	               /         |        |         \
//	              v          +--------+          v
//	       +----------+          |           +----------+
//	       |          |          | send H /  |          |
//	,------+ reserved |          | recv H    | reserved +------.
//	|      | (local)  |          |           | (remote) |      |
//	|      +---+------+          v           +------+---+      |
//	|          |             +--------+             |          |
//	|          |     recv ES |        | send ES     |          |
//	|   send H |     ,-------+  open  +-------.     | recv H   |
//	|          |    /        |        |        \    |          |
//	|          v   v         +---+----+         v   v          |
//	|      +----------+          |           +----------+      |
//	|      |   half-  |          |           |   half-  |      |
//	|      |  closed  |          | send R /  |  closed  |      |
//	|      | (remote) |          | recv R    | (local)  |      |
//	|      +----+-----+          |           +-----+----+      |
//	|           |                |                 |           |
//	|           | send ES /      |       recv ES / |           |
//	|           |  send R /      v        send R / |           |
//	|           |  recv R    +--------+   recv R   |           |
//	| send R /  `----------->|        |<-----------'  send R / |
//	| recv R                 | closed |               recv R   |
//	`----------------------->|        |<-----------------------'
//	                         +--------+
//
// H: HEADERS, ES: END_STREAM flag, R: RST_STREAM, PP: PUSH_PROMISE.
//
// leangrpc never enables server push, so the reserved states do not exist
// here: a PUSH_PROMISE is a connection error before it reaches a stream.
// Each event is one method; an event the diagram does not allow in the
// current state returns a transitionError and leaves the state unchanged.
type streamState uint8

const (
	stateIdle streamState = iota
	stateOpen
	stateHalfClosedLocal  // we sent END_STREAM
	stateHalfClosedRemote // the peer sent END_STREAM
	stateClosed
)

var stateNames = [...]string{"idle", "open", "half-closed(local)", "half-closed(remote)", "closed"}

func (s streamState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state?"
}

// transitionError is an event the state does not allow. For events received
// from the peer, Code and Conn say how to answer (RFC 9113 §5.1); for
// events the local side attempts, it is API misuse.
type transitionError struct {
	Code h2frame.ErrCode
	Conn bool // a connection error rather than a stream error
}

func (e transitionError) Error() string {
	return "h2conn: illegal stream transition: " + e.Code.String()
}

var (
	errRecvIdle   = transitionError{Code: h2frame.ErrCodeProtocol, Conn: true}
	errRecvClosed = transitionError{Code: h2frame.ErrCodeStreamClosed}
	errSendState  = transitionError{Code: h2frame.ErrCodeInternal}
)

// sendHeaders is the event "send H", with END_STREAM when end. HEADERS
// after the first are trailers and must end the stream.
func (s streamState) sendHeaders(end bool) (streamState, error) {
	switch s {
	case stateIdle:
		if end {
			return stateHalfClosedLocal, nil
		}
		return stateOpen, nil
	case stateOpen, stateHalfClosedRemote:
		return s.sendEnd(end), nil
	}
	return s, errSendState
}

// sendData is the event "send DATA", with END_STREAM when end.
func (s streamState) sendData(end bool) (streamState, error) {
	switch s {
	case stateOpen, stateHalfClosedRemote:
		return s.sendEnd(end), nil
	}
	return s, errSendState
}

func (s streamState) sendEnd(end bool) streamState {
	if !end {
		return s
	}
	if s == stateOpen {
		return stateHalfClosedLocal
	}
	return stateClosed
}

// recvHeaders is the event "recv H", with END_STREAM when end.
func (s streamState) recvHeaders(end bool) (streamState, error) {
	switch s {
	case stateIdle:
		if end {
			return stateHalfClosedRemote, nil
		}
		return stateOpen, nil
	case stateOpen, stateHalfClosedLocal:
		return s.recvEnd(end), nil
	case stateHalfClosedRemote:
		return s, errRecvClosed
	}
	return s, errRecvClosed
}

// recvData is the event "recv DATA", with END_STREAM when end.
func (s streamState) recvData(end bool) (streamState, error) {
	switch s {
	case stateIdle:
		return s, errRecvIdle
	case stateOpen, stateHalfClosedLocal:
		return s.recvEnd(end), nil
	}
	return s, errRecvClosed
}

func (s streamState) recvEnd(end bool) streamState {
	if !end {
		return s
	}
	if s == stateOpen {
		return stateHalfClosedRemote
	}
	return stateClosed
}

// recvReset is the event "recv R". RST_STREAM on an idle stream is a
// connection error (§6.4).
func (s streamState) recvReset() (streamState, error) {
	if s == stateIdle {
		return s, errRecvIdle
	}
	return stateClosed, nil
}

// sendReset is the event "send R". Any state may reset; idle and closed
// streams send nothing.
func (s streamState) sendReset() streamState { return stateClosed }

// recvWindowUpdate checks a WINDOW_UPDATE for the stream: allowed in every
// state but idle (§5.1, §6.9).
func (s streamState) recvWindowUpdate() error {
	if s == stateIdle {
		return errRecvIdle
	}
	return nil
}

// canRecv reports whether the peer may still send DATA or HEADERS.
func (s streamState) canRecv() bool { return s == stateOpen || s == stateHalfClosedLocal }

// canSend reports whether we may still send DATA or trailers.
func (s streamState) canSend() bool { return s == stateOpen || s == stateHalfClosedRemote }
