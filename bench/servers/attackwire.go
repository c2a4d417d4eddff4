package main

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The raw HTTP/2 an attacker writes: frames and header blocks built by
// hand, so that the attacks can send what no well-behaved library would
// (a header block that never ends, a reset right after each request).

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Frame types and flags of RFC 9113 §6 that the attacks use.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4

	errCodeCancel = 0x8
)

// appendFrame appends one frame.
func appendFrame(dst []byte, typ, flags byte, stream uint32, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	dst = binary.BigEndian.AppendUint32(dst, stream&0x7fffffff)
	return append(dst, payload...)
}

// appendHPACKInt appends an HPACK integer (RFC 7541 §5.1) whose first
// byte carries the bits of first above an n-bit prefix.
func appendHPACKInt(dst []byte, first byte, n uint, v int) []byte {
	max := 1<<n - 1
	if v < max {
		return append(dst, first|byte(v))
	}
	dst = append(dst, first|byte(max))
	for v -= max; v >= 128; v >>= 7 {
		dst = append(dst, byte(v&0x7f|0x80))
	}
	return append(dst, byte(v))
}

// appendLiteral appends a header field as a literal without indexing with
// a literal name (RFC 7541 §6.2.2), or with incremental indexing (§6.2.1)
// when index is set; strings are not Huffman-coded.
func appendLiteral(dst []byte, name, value string, index bool) []byte {
	if index {
		dst = append(dst, 0x40)
	} else {
		dst = append(dst, 0x00)
	}
	dst = appendHPACKInt(dst, 0, 7, len(name))
	dst = append(dst, name...)
	dst = appendHPACKInt(dst, 0, 7, len(value))
	return append(dst, value...)
}

// requestBlock is the header block of a gRPC request for path.
func requestBlock(path string) []byte {
	var b []byte
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", path},
		{":authority", "attack"}, {"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		b = appendLiteral(b, f[0], f[1], false)
	}
	return b
}

// streamMethod is the streaming call the attacks open and never end.
const streamMethod = "/grpc.testing.TestService/FullDuplexCall"

// attackConn is one attacking connection. Unless told not to read, it
// reads what the server sends, answers its SETTINGS (so that the attack
// is not cut short by the SETTINGS timeout rather than by a defence) and
// notes a GOAWAY's code.
type attackConn struct {
	nc net.Conn
	// acked: the preface acknowledged the server's SETTINGS in advance
	// and the reader acknowledges none: an attacker inside a header block
	// must send nothing but CONTINUATION.
	acked  bool
	wmu    sync.Mutex
	closed chan struct{} // closed once the server closed or reset the connection
	goAway chan uint32   // the first GOAWAY's error code, if one came
	// goAwayDebug is the last GOAWAY's debug data (its start), written by
	// the reading goroutine before it sends the code on goAway.
	goAwayDebug string
	heard       atomic.Bool // the server sent at least one byte
}

// dialAttack connects to addr and, with preface set, sends the client
// preface and an empty SETTINGS frame.
func dialAttack(addr string, preface, read bool) (*attackConn, error) {
	return dialAttackAcked(addr, preface, read, false)
}

// dialAttackAcked is dialAttack whose preface, when acked is set, also
// acknowledges the server's SETTINGS in advance (attackConn.acked).
func dialAttackAcked(addr string, preface, read, acked bool) (*attackConn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &attackConn{nc: nc, acked: acked, closed: make(chan struct{}), goAway: make(chan uint32, 1)}
	if preface {
		b := appendFrame([]byte(clientPreface), frameSettings, 0, 0, nil)
		if acked {
			b = appendFrame(b, frameSettings, flagAck, 0, nil)
		}
		if err := c.write(b); err != nil {
			nc.Close()
			return nil, err
		}
	}
	if read {
		go c.readLoop()
	} else {
		go c.watchClose()
	}
	return c, nil
}

// write writes b whole, giving up after a few seconds of a server that
// does not read.
func (c *attackConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := c.nc.Write(b)
	return err
}

func (c *attackConn) readLoop() {
	defer close(c.closed)
	r := bufio.NewReaderSize(c.nc, 32<<10)
	var hdr [9]byte
	payload := make([]byte, 0, 16<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		c.heard.Store(true)
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		if cap(payload) < n {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		switch hdr[3] {
		case frameSettings:
			if hdr[4]&flagAck == 0 && !c.acked {
				go c.write(appendFrame(nil, frameSettings, flagAck, 0, nil))
			}
		case frameGoAway:
			c.noteGoAway(payload)
		}
	}
}

// noteGoAway records a GOAWAY from the start of its payload (at least
// its first goAwayKept bytes, when it has that many).
func (c *attackConn) noteGoAway(payload []byte) {
	if len(payload) < 8 {
		return
	}
	c.goAwayDebug = string(payload[8:min(len(payload), goAwayKept)])
	select {
	case c.goAway <- binary.BigEndian.Uint32(payload[4:8]):
	default:
	}
}

// goAwayKept is how much of a GOAWAY's payload an attacker looks at: the
// last stream id, the code and the start of the debug data.
const goAwayKept = 8 + 40

// goAwayScanner finds the GOAWAYs in bytes drained in pieces of any size
// by an attacker that does not read frame by frame, skipping the payload
// of every other frame without keeping it.
type goAwayScanner struct {
	head []byte // what came of the current frame's header, and of a GOAWAY's payload start
	skip int    // payload bytes of the current frame still to pass over
}

// scan takes the next bytes drained and calls found with the payload start
// of each GOAWAY in them.
func (s *goAwayScanner) scan(b []byte, found func(payload []byte)) {
	for len(b) > 0 {
		if s.skip > 0 {
			n := min(s.skip, len(b))
			s.skip -= n
			b = b[n:]
			continue
		}
		need := 9
		goAway := len(s.head) >= 9 && s.head[3] == frameGoAway
		if goAway {
			need += min(frameLength(s.head), goAwayKept)
		}
		n := min(need-len(s.head), len(b))
		s.head = append(s.head, b[:n]...)
		b = b[n:]
		switch {
		case len(s.head) < need:
			// b is used up: the rest comes with the next bytes.
		case !goAway && s.head[3] == frameGoAway && frameLength(s.head) > 0:
			// The header of a GOAWAY: its payload start comes next.
		default:
			if goAway {
				found(s.head[9:])
			}
			s.skip = frameLength(s.head) - (len(s.head) - 9)
			s.head = s.head[:0]
		}
	}
}

// frameLength is the payload length in a frame header.
func frameLength(hdr []byte) int { return int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2]) }

// watchClose notices the server closing a connection whose attacker does
// not read: a short read every 100 ms sees the end once what the server
// sent before it was drained, and drains at most 40 KB a second, too
// little to relieve a server whose replies a flood piles up. A GOAWAY in
// what it drained is noted, so that the report tells a close with one
// from a close without.
func (c *attackConn) watchClose() {
	defer close(c.closed)
	var b [4 << 10]byte
	var frames goAwayScanner
	for {
		time.Sleep(100 * time.Millisecond)
		c.nc.SetReadDeadline(time.Now().Add(time.Millisecond))
		n, err := c.nc.Read(b[:])
		if n > 0 {
			c.heard.Store(true)
			frames.scan(b[:n], c.noteGoAway)
		}
		if ne, ok := err.(net.Error); err != nil && !(ok && ne.Timeout()) {
			return
		}
	}
}

func (c *attackConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// goAwayCode returns the GOAWAY's code and whether one came.
func (c *attackConn) goAwayCode() (uint32, bool) {
	select {
	case code := <-c.goAway:
		c.goAway <- code
		return code, true
	default:
		return 0, false
	}
}

func (c *attackConn) close() { c.nc.Close() }

// errCodeName names the HTTP/2 error codes a defence may send.
func errCodeName(code uint32) string {
	names := map[uint32]string{
		0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x2: "INTERNAL_ERROR", 0x3: "FLOW_CONTROL_ERROR",
		0x4: "SETTINGS_TIMEOUT", 0x5: "STREAM_CLOSED", 0x6: "FRAME_SIZE_ERROR", 0x7: "REFUSED_STREAM",
		0x8: "CANCEL", 0x9: "COMPRESSION_ERROR", 0xa: "CONNECT_ERROR", 0xb: "ENHANCE_YOUR_CALM",
		0xc: "INADEQUATE_SECURITY", 0xd: "HTTP_1_1_REQUIRED",
	}
	if n, ok := names[code]; ok {
		return n
	}
	return "0x" + string("0123456789abcdef"[code>>4&0xf]) + string("0123456789abcdef"[code&0xf])
}
