package h2conn

import (
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// onHeaders handles a HEADERS frame (CONTINUATIONs merged by h2frame): a new
// request on a server, response headers or trailers on an open stream.
func (c *Conn) onHeaders(f *h2frame.HeadersFrame, rb *readBatch) *Error {
	id := f.StreamID
	end := f.EndStream()
	c.lockFrame(rb)
	if s := c.streams[id]; s != nil && s.state != stateIdle {
		return c.onStreamHeadersLocked(s, f, rb)
	}
	if c.role == RoleClient {
		idle := c.idleLocked(id)
		c.unlockFrame(rb)
		if idle {
			return connErr(h2frame.ErrCodeProtocol, "headers_on_idle_stream")
		}
		return nil // a response to a stream we reset: discarded (§5.1 closed)
	}
	if !c.isPeerID(id) {
		c.unlockFrame(rb)
		return connErr(h2frame.ErrCodeProtocol, "headers_on_server_stream_id")
	}
	if id <= c.maxPeerID {
		// Trailers the peer sent before our RST_STREAM reached it are
		// ignored, as DATA is (RFC 9113 §5.1): a client that ends its
		// request with trailers does so whether or not the server
		// answered first. Their block was decoded, so HPACK stays in step.
		late := c.wasResetLocked(id)
		closed := c.wasClosedLocked(id)
		c.unlockFrame(rb)
		if late && end {
			return nil
		}
		if closed {
			return connErr(h2frame.ErrCodeStreamClosed, "headers_on_closed_stream")
		}
		return connErr(h2frame.ErrCodeProtocol, "stream_id_not_increasing")
	}
	c.maxPeerID = id
	if c.closing {
		c.unlockFrame(rb)
		return nil
	}
	refuse := func(code h2frame.ErrCode, reason string) *Error {
		c.rememberClosedLocked(id, true)
		c.unlockFrame(rb)
		return c.resetStream(id, code, reason)
	}
	if c.goAwaySent && id > c.goAwayLastID {
		return refuse(h2frame.ErrCodeRefusedStream, "after_goaway")
	}
	if uint32(c.numPeer) >= c.cfg.MaxConcurrentStreams {
		return refuse(h2frame.ErrCodeRefusedStream, "max_concurrent_streams")
	}
	if c.ledger().RefusesStreams() {
		// The memory budget is under pressure and this connection holds
		// more than its share (membudget.go).
		return refuse(h2frame.ErrCodeRefusedStream, "memory_pressure")
	}
	if f.Invalid != "" {
		return refuse(h2frame.ErrCodeProtocol, f.Invalid)
	}
	if f.Truncated {
		c.rememberClosedLocked(id, true)
		c.queueCtrlLocked(ctrlFrame{kind: ctrl431, id: id}, true)
		if !end {
			c.queueCtrlLocked(ctrlFrame{kind: ctrlRST, id: id, code: h2frame.ErrCodeNo}, true)
		}
		c.unlockFrame(rb)
		return c.countResets(oversizedListWeight)
	}
	clen, reason := checkRequest(f.Fields)
	if reason != "" {
		return refuse(h2frame.ErrCodeProtocol, reason)
	}
	if end && clen > 0 {
		return refuse(h2frame.ErrCodeProtocol, "content_length_mismatch")
	}
	s := c.newStreamLocked(id, false)
	s.hdrs = append(s.hdrs[:0], f.Fields...)
	s.hdrsWire = f.Length
	c.ledger().Charge(headerListBytes(s.hdrs)) // released when the stream closes
	s.contentLength = clen
	s.recvEOF = end
	st, _ := stateIdle.recvHeaders(end)
	s.state = st
	c.unlockFrame(rb)
	c.handler.HandleStream(s)
	return nil
}

// onStreamHeadersLocked handles HEADERS on a stream that exists: response
// headers (client), or trailers, which must end the stream. Called with mu
// held; releases it, unless a batch keeps it (readbatch.go).
func (c *Conn) onStreamHeadersLocked(s *Stream, f *h2frame.HeadersFrame, rb *readBatch) *Error {
	id := s.id
	end := f.EndStream()
	reset := func(code h2frame.ErrCode, reason string) *Error {
		c.unlockFrame(rb)
		return c.resetStream(id, code, reason)
	}
	if !s.state.canRecv() {
		return reset(h2frame.ErrCodeStreamClosed, "headers_on_half_closed_stream")
	}
	if f.Invalid != "" {
		return reset(h2frame.ErrCodeProtocol, f.Invalid)
	}
	if f.Truncated {
		return reset(h2frame.ErrCodeProtocol, "header_list_too_large")
	}
	if s.local && !s.gotHeaders {
		status, clen, reason := checkResponse(f.Fields)
		if reason != "" {
			return reset(h2frame.ErrCodeProtocol, reason)
		}
		if status >= 100 && status < 200 {
			if end {
				return reset(h2frame.ErrCodeProtocol, "informational_end_stream")
			}
			c.unlockFrame(rb)
			return nil // 1xx: skipped
		}
		s.contentLength = clen
		s.rmu.Lock()
		s.hdrs = append(s.hdrs[:0], f.Fields...)
		s.hdrsWire = f.Length
		s.gotHeaders = true
		if end && clen <= 0 {
			s.trls = s.hdrs
			s.trlsWire = f.Length
			s.trailersOnly = true
			s.recvEOF = true
		}
		s.rmu.Unlock()
		if end && clen > 0 {
			return reset(h2frame.ErrCodeProtocol, "content_length_mismatch")
		}
	} else {
		if !end {
			return reset(h2frame.ErrCodeProtocol, "trailers_without_end_stream")
		}
		for _, hf := range f.Fields {
			if len(hf.Name) > 0 && hf.Name[0] == ':' {
				return reset(h2frame.ErrCodeProtocol, "pseudo_header_in_trailers")
			}
		}
		if s.contentLength >= 0 && s.recvBytes != s.contentLength {
			return reset(h2frame.ErrCodeProtocol, "content_length_mismatch")
		}
		s.rmu.Lock()
		s.trls = append(s.trls[:0], f.Fields...)
		s.trlsWire = f.Length
		s.recvEOF = true
		s.rmu.Unlock()
		// No DATA lands after the trailers: the registration's reference
		// goes now, as after a DATA frame with END_STREAM, not with a
		// Release that a streaming call may never make.
		s.endSinkLocked()
	}
	st, _ := s.state.recvHeaders(end)
	s.rmu.Lock()
	s.signalRecvFrame(rb)
	s.rmu.Unlock()
	c.setStateLocked(s, st)
	c.doneFrame(rb, s.takeArrivalLocked()) // a request's trailers end it
	return nil
}

// checkRequest applies the request rules of RFC 9113 §8.3.1 that the frame
// layer leaves to the engine. It returns the declared content-length (-1:
// none) and the rule broken, if any.
func checkRequest(fields []hpack.HeaderField) (int64, string) {
	var method, scheme, path bool
	var isConnect bool
	clen := int64(-1)
	for _, f := range fields {
		switch f.Name {
		case ":method":
			method = true
			isConnect = f.Value == "CONNECT"
		case ":scheme":
			scheme = true
		case ":path":
			if f.Value == "" {
				return 0, "empty_path"
			}
			path = true
		case ":authority":
		case ":status":
			return 0, "status_in_request"
		case "content-length":
			n, ok := parseContentLength(f.Value)
			if !ok || (clen >= 0 && n != clen) {
				return 0, "bad_content_length"
			}
			clen = n
		default:
			if len(f.Name) > 0 && f.Name[0] == ':' {
				return 0, "unknown_pseudo_header"
			}
		}
	}
	if !method {
		return 0, "missing_method"
	}
	if isConnect {
		if scheme || path {
			return 0, "connect_with_path"
		}
		return clen, ""
	}
	if !scheme || !path {
		return 0, "missing_pseudo_header"
	}
	return clen, ""
}

// checkResponse applies §8.3.2: a response carries :status and no request
// pseudo-headers.
func checkResponse(fields []hpack.HeaderField) (status int, clen int64, reason string) {
	clen = -1
	status = -1
	for _, f := range fields {
		switch f.Name {
		case ":status":
			if len(f.Value) != 3 {
				return 0, 0, "bad_status"
			}
			n := 0
			for i := 0; i < 3; i++ {
				ch := f.Value[i]
				if ch < '0' || ch > '9' {
					return 0, 0, "bad_status"
				}
				n = n*10 + int(ch-'0')
			}
			status = n
		case "content-length":
			n, ok := parseContentLength(f.Value)
			if !ok || (clen >= 0 && n != clen) {
				return 0, 0, "bad_content_length"
			}
			clen = n
		default:
			if len(f.Name) > 0 && f.Name[0] == ':' {
				return 0, 0, "request_pseudo_header_in_response"
			}
		}
	}
	if status < 0 {
		return 0, 0, "missing_status"
	}
	return status, clen, ""
}

func parseContentLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		ch := v[i]
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
	}
	return n, true
}
