package h2test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// Role is the HTTP/2 role the scripted peer plays.
type Role int

const (
	// ClientRole: the peer sends the client preface; it drives a server
	// engine.
	ClientRole Role = iota
	// ServerRole: the peer reads the client preface; it drives a client
	// engine.
	ServerRole
)

// DefaultTimeout bounds every expectation unless Peer.Timeout says otherwise.
// Inside a synctest bubble it is fake time and costs nothing.
const DefaultTimeout = 5 * time.Second

// Peer is a scripted HTTP/2 endpoint that writes raw frames and checks what
// comes back. Its methods must be called from the test goroutine: failures
// call t.Fatalf.
//
// The Want methods read the next frame the test has not consumed and fail
// the test unless it is the one wanted. Frames the test did not ask for are
// skipped only when their type is in Ignore (and is not the wanted type):
// by default WINDOW_UPDATE is skipped, PING and SETTINGS are skipped and
// acknowledged, and SETTINGS ACKs are skipped while the peer has SETTINGS
// unacknowledged. Every received frame updates the peer's view of its send
// windows and of the remote settings.
type Peer struct {
	T    testing.TB
	Conn net.Conn
	Role Role
	// Timeout bounds each Want; zero means DefaultTimeout.
	Timeout time.Duration
	// Decoder decodes received header blocks; nil means internal/hpack's.
	Decoder HeaderDecoder
	// Ignore lists the frame types Want may skip; see Peer.
	Ignore map[h2frame.Type]bool
	// Verbose logs every frame sent and received with t.Logf.
	Verbose bool

	// RemoteSettings holds the last value of each setting the remote end
	// sent.
	RemoteSettings map[h2frame.SettingID]uint32
	// WriteErr is the first write error, when the remote end had closed.
	WriteErr error

	rbuf      []byte
	pending   []*Frame // read, deferred by Greet, not yet consumed
	recent    []string // the last frames received, for failure messages
	eof       error    // the read error that ended the stream, once seen
	unacked   int      // SETTINGS we sent that are not acknowledged yet
	connSend  int64    // our connection send window
	streamWin map[uint32]int64
	initWin   int64 // the remote SETTINGS_INITIAL_WINDOW_SIZE
	greeted   bool
}

// NewPeer returns a peer playing role over c.
func NewPeer(t testing.TB, c net.Conn, role Role) *Peer {
	return &Peer{
		T:              t,
		Conn:           c,
		Role:           role,
		Ignore:         map[h2frame.Type]bool{h2frame.TypeWindowUpdate: true, h2frame.TypePing: true, h2frame.TypeSettings: true},
		RemoteSettings: map[h2frame.SettingID]uint32{},
		connSend:       h2frame.DefaultInitialWindow,
		streamWin:      map[uint32]int64{},
		initWin:        h2frame.DefaultInitialWindow,
	}
}

func (p *Peer) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return DefaultTimeout
}

// ---- writing ----

func (p *Peer) write(b []byte) {
	p.T.Helper()
	p.Conn.SetWriteDeadline(time.Now().Add(p.timeout()))
	_, err := p.Conn.Write(b)
	if err == nil {
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		p.T.Fatalf("h2test: write of %d bytes blocked for %v: the remote end is not reading", len(b), p.timeout())
	}
	if p.WriteErr == nil {
		p.WriteErr = err
	}
	p.T.Logf("h2test: write failed (remote closed?): %v", err)
}

func (p *Peer) writeFrame(t h2frame.Type, flags h2frame.Flags, id uint32, payload []byte) {
	p.T.Helper()
	if p.Verbose {
		f := &Frame{FrameHeader: h2frame.FrameHeader{Length: uint32(len(payload)), Type: t, Flags: flags, StreamID: id}, Payload: payload}
		p.T.Logf("h2test: peer sends %v", f)
	}
	p.write(AppendFrame(nil, t, flags, id, payload))
}

// WriteRaw writes one frame exactly as given.
func (p *Peer) WriteRaw(t h2frame.Type, flags h2frame.Flags, streamID uint32, payload []byte) {
	p.T.Helper()
	p.writeFrame(t, flags, streamID, payload)
}

// WriteBytes writes b as is (a bad preface, a truncated frame...).
func (p *Peer) WriteBytes(b []byte) {
	p.T.Helper()
	p.write(b)
}

// WritePreface writes the client connection preface.
func (p *Peer) WritePreface() {
	p.T.Helper()
	p.write([]byte(ClientPreface))
}

// WriteSettings writes a SETTINGS frame.
func (p *Peer) WriteSettings(settings ...h2frame.Setting) {
	p.T.Helper()
	p.unacked++
	p.writeFrame(h2frame.TypeSettings, 0, 0, SettingsPayload(settings...))
}

// WriteSettingsAck writes a SETTINGS ACK.
func (p *Peer) WriteSettingsAck() {
	p.T.Helper()
	p.writeFrame(h2frame.TypeSettings, h2frame.FlagAck, 0, nil)
}

// WritePing writes a PING.
func (p *Peer) WritePing(data [8]byte) {
	p.T.Helper()
	p.writeFrame(h2frame.TypePing, 0, 0, data[:])
}

// WritePingAck writes a PING with ACK.
func (p *Peer) WritePingAck(data [8]byte) {
	p.T.Helper()
	p.writeFrame(h2frame.TypePing, h2frame.FlagAck, 0, data[:])
}

// WriteWindowUpdate writes a WINDOW_UPDATE (streamID 0: the connection).
func (p *Peer) WriteWindowUpdate(streamID, increment uint32) {
	p.T.Helper()
	p.writeFrame(h2frame.TypeWindowUpdate, 0, streamID, binary.BigEndian.AppendUint32(nil, increment))
}

// WriteRST writes a RST_STREAM.
func (p *Peer) WriteRST(streamID uint32, code h2frame.ErrCode) {
	p.T.Helper()
	p.writeFrame(h2frame.TypeRSTStream, 0, streamID, binary.BigEndian.AppendUint32(nil, uint32(code)))
}

// WriteGoAway writes a GOAWAY.
func (p *Peer) WriteGoAway(lastStreamID uint32, code h2frame.ErrCode, debug string) {
	p.T.Helper()
	b := binary.BigEndian.AppendUint32(nil, lastStreamID)
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	p.writeFrame(h2frame.TypeGoAway, 0, 0, append(b, debug...))
}

// WritePriority writes a PRIORITY frame.
func (p *Peer) WritePriority(streamID uint32, pr h2frame.Priority) {
	p.T.Helper()
	dep := pr.StreamDep
	if pr.Exclusive {
		dep |= 1 << 31
	}
	p.writeFrame(h2frame.TypePriority, 0, streamID, append(binary.BigEndian.AppendUint32(nil, dep), pr.Weight))
}

// WriteData writes one DATA frame and charges its length to the peer's send
// windows.
func (p *Peer) WriteData(streamID uint32, endStream bool, data []byte) {
	p.T.Helper()
	var fl h2frame.Flags
	if endStream {
		fl = h2frame.FlagEndStream
	}
	p.charge(streamID, len(data))
	p.writeFrame(h2frame.TypeData, fl, streamID, data)
}

// WriteDataPadded writes one DATA frame with pad bytes of padding (the pad
// length byte and the padding count against flow control too).
func (p *Peer) WriteDataPadded(streamID uint32, endStream bool, data []byte, pad uint8) {
	p.T.Helper()
	fl := h2frame.FlagPadded
	if endStream {
		fl |= h2frame.FlagEndStream
	}
	payload := append([]byte{pad}, data...)
	payload = append(payload, make([]byte, pad)...)
	p.charge(streamID, len(payload))
	p.writeFrame(h2frame.TypeData, fl, streamID, payload)
}

// WriteHeaders writes a header block of alternating names and values, split
// into HEADERS and CONTINUATION frames by the remote max frame size.
func (p *Peer) WriteHeaders(streamID uint32, endStream bool, kv ...string) {
	p.T.Helper()
	p.WriteHeaderFields(streamID, endStream, Fields(kv...))
}

// WriteHeaderFields is WriteHeaders for a field list.
func (p *Peer) WriteHeaderFields(streamID uint32, endStream bool, fields []hpack.HeaderField) {
	p.T.Helper()
	block := EncodeHeaders(fields...)
	max := int(p.remoteMaxFrameSize())
	var fl h2frame.Flags
	if endStream {
		fl = h2frame.FlagEndStream
	}
	first := true
	for first || len(block) > 0 {
		n := min(len(block), max)
		chunk := block[:n]
		block = block[n:]
		f := fl
		if len(block) == 0 {
			f |= h2frame.FlagEndHeaders
		}
		if first {
			p.writeFrame(h2frame.TypeHeaders, f, streamID, chunk)
			first = false
		} else {
			p.writeFrame(h2frame.TypeContinuation, f&h2frame.FlagEndHeaders, streamID, chunk)
		}
	}
}

// WriteHeadersBlock writes one HEADERS frame carrying block as is, with the
// given flags (add FlagEndHeaders unless CONTINUATION follows).
func (p *Peer) WriteHeadersBlock(streamID uint32, flags h2frame.Flags, block []byte) {
	p.T.Helper()
	p.writeFrame(h2frame.TypeHeaders, flags, streamID, block)
}

// WriteContinuation writes one CONTINUATION frame.
func (p *Peer) WriteContinuation(streamID uint32, endHeaders bool, block []byte) {
	p.T.Helper()
	var fl h2frame.Flags
	if endHeaders {
		fl = h2frame.FlagEndHeaders
	}
	p.writeFrame(h2frame.TypeContinuation, fl, streamID, block)
}

func (p *Peer) remoteMaxFrameSize() uint32 {
	if v, ok := p.RemoteSettings[h2frame.SettingMaxFrameSize]; ok && v >= h2frame.MinMaxFrameSize {
		return v
	}
	return h2frame.MinMaxFrameSize
}

// ---- flow control bookkeeping ----

func (p *Peer) charge(streamID uint32, n int) {
	p.connSend -= int64(n)
	w, ok := p.streamWin[streamID]
	if !ok {
		w = p.initWin
	}
	p.streamWin[streamID] = w - int64(n)
}

// SendWindow reports how much DATA the peer may still send on the connection
// and on the stream, as far as the frames it has read tell.
func (p *Peer) SendWindow(streamID uint32) (conn, stream int64) {
	w, ok := p.streamWin[streamID]
	if !ok {
		w = p.initWin
	}
	return p.connSend, w
}

// track updates the peer's view of windows and settings from a received
// frame.
func (p *Peer) track(f *Frame) {
	switch f.Type {
	case h2frame.TypeWindowUpdate:
		if f.StreamID == 0 {
			p.connSend += int64(f.Increment())
		} else {
			w, ok := p.streamWin[f.StreamID]
			if !ok {
				w = p.initWin
			}
			p.streamWin[f.StreamID] = w + int64(f.Increment())
		}
	case h2frame.TypeSettings:
		if f.IsAck() {
			return
		}
		for _, s := range f.Settings() {
			p.RemoteSettings[s.ID] = s.Val
			if s.ID == h2frame.SettingInitialWindowSize {
				d := int64(s.Val) - p.initWin
				for id := range p.streamWin {
					p.streamWin[id] += d
				}
				p.initWin = int64(s.Val)
			}
		}
	}
}

// ---- reading ----

// ReadFrame reads the next frame, consumed or not by a Want, waiting at most
// d. It returns the read error (os.ErrDeadlineExceeded, io.EOF...) when no
// whole frame came.
func (p *Peer) ReadFrame(d time.Duration) (*Frame, error) {
	if len(p.pending) > 0 {
		f := p.pending[0]
		p.pending = p.pending[1:]
		return f, nil
	}
	return p.readWire(d)
}

func (p *Peer) readWire(d time.Duration) (*Frame, error) {
	deadline := time.Now().Add(d)
	for {
		if f, rest, ok := ParseFrame(p.rbuf); ok {
			p.rbuf = rest
			p.track(f)
			p.note(f)
			return f, nil
		}
		if p.eof != nil {
			return nil, p.eof
		}
		p.Conn.SetReadDeadline(deadline)
		var tmp [32 << 10]byte
		n, err := p.Conn.Read(tmp[:])
		p.rbuf = append(p.rbuf, tmp[:n]...)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, err
			}
			p.eof = err // returned once the whole frames before it are read
			if _, _, ok := ParseFrame(p.rbuf); !ok && len(p.rbuf) > 0 {
				p.eof = fmt.Errorf("%w (after %d bytes of a partial frame)", err, len(p.rbuf))
			}
		}
	}
}

func (p *Peer) note(f *Frame) {
	s := f.String()
	if p.Verbose {
		p.T.Logf("h2test: peer got %s", s)
	}
	p.recent = append(p.recent, s)
	if len(p.recent) > 8 {
		p.recent = p.recent[1:]
	}
}

func (p *Peer) history() string {
	if len(p.recent) == 0 {
		return "(no frames received)"
	}
	return "last frames received:\n  " + strings.Join(p.recent, "\n  ")
}

// skip reports whether f may be passed over while waiting for a frame of
// type want, and answers it when the protocol requires.
func (p *Peer) skip(f *Frame, want ...h2frame.Type) bool {
	if slices.Contains(want, f.Type) || !p.Ignore[f.Type] {
		return false
	}
	switch f.Type {
	case h2frame.TypePing:
		if !f.IsAck() {
			p.WritePingAck(f.PingData())
		}
	case h2frame.TypeSettings:
		if f.IsAck() {
			if p.unacked == 0 {
				return false // an ACK of nothing is worth a look
			}
			p.unacked--
		} else {
			p.WriteSettingsAck()
		}
	}
	return true
}

// next returns the next frame the test has not consumed, skipping what may
// be skipped, or fails the test.
func (p *Peer) next(want h2frame.Type, what string) *Frame {
	p.T.Helper()
	return p.nextOf(what, want)
}

func (p *Peer) nextOf(what string, want ...h2frame.Type) *Frame {
	p.T.Helper()
	deadline := time.Now().Add(p.timeout())
	for {
		f, err := p.ReadFrame(time.Until(deadline))
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				p.T.Fatalf("h2test: want %s: nothing within %v\n%s", what, p.timeout(), p.history())
			}
			p.T.Fatalf("h2test: want %s: connection ended: %v\n%s", what, err, p.history())
		}
		if p.skip(f, want...) {
			continue
		}
		if !slices.Contains(want, f.Type) {
			p.T.Fatalf("h2test: want %s, got %v\n%s", what, f, p.history())
		}
		return f
	}
}

// WantFrame returns the next frame, which must be of type t.
func (p *Peer) WantFrame(t h2frame.Type) *Frame {
	p.T.Helper()
	return p.next(t, t.String())
}

// WantOneOf returns the next frame, which must be of one of the types.
func (p *Peer) WantOneOf(types ...h2frame.Type) *Frame {
	p.T.Helper()
	return p.nextOf(fmt.Sprint("one of ", types), types...)
}

// WantSettings returns the next frame, which must be a SETTINGS without ACK.
func (p *Peer) WantSettings() *Frame {
	p.T.Helper()
	f := p.next(h2frame.TypeSettings, "SETTINGS")
	if f.IsAck() {
		p.T.Fatalf("h2test: want SETTINGS, got a SETTINGS ACK\n%s", p.history())
	}
	return f
}

// WantSettingsAck waits for a SETTINGS ACK.
func (p *Peer) WantSettingsAck() {
	p.T.Helper()
	for {
		f := p.next(h2frame.TypeSettings, "SETTINGS ACK")
		if f.IsAck() {
			if f.Length != 0 {
				p.T.Fatalf("h2test: SETTINGS ACK with a %d-byte payload", f.Length)
			}
			if p.unacked > 0 {
				p.unacked--
			}
			return
		}
		p.WriteSettingsAck() // new settings from the remote end: answer, go on
	}
}

// WantPingAck waits for a PING ACK carrying data.
func (p *Peer) WantPingAck(data [8]byte) {
	p.T.Helper()
	for {
		f := p.next(h2frame.TypePing, fmt.Sprintf("PING ACK %x", data))
		if !f.IsAck() {
			p.WritePingAck(f.PingData())
			continue
		}
		if f.PingData() != data || f.Length != 8 {
			p.T.Fatalf("h2test: want PING ACK %x, got %v\n%s", data, f, p.history())
		}
		return
	}
}

// WantPing waits for a PING without ACK and returns its data; it does not
// answer it.
func (p *Peer) WantPing() [8]byte {
	p.T.Helper()
	f := p.next(h2frame.TypePing, "PING")
	if f.IsAck() {
		p.T.Fatalf("h2test: want PING, got %v\n%s", f, p.history())
	}
	return f.PingData()
}

// WantRST waits for a RST_STREAM on streamID with code.
func (p *Peer) WantRST(streamID uint32, code h2frame.ErrCode) {
	p.T.Helper()
	what := fmt.Sprintf("RST_STREAM stream=%d code=%v", streamID, code)
	f := p.next(h2frame.TypeRSTStream, what)
	if f.StreamID != streamID || f.ErrCode() != code {
		p.T.Fatalf("h2test: want %s, got %v\n%s", what, f, p.history())
	}
}

// WantGoAway waits for a GOAWAY with code and returns it (LastStreamID,
// DebugData).
func (p *Peer) WantGoAway(code h2frame.ErrCode) *Frame {
	p.T.Helper()
	what := fmt.Sprintf("GOAWAY code=%v", code)
	f := p.next(h2frame.TypeGoAway, what)
	if f.ErrCode() != code || f.StreamID != 0 {
		p.T.Fatalf("h2test: want %s, got %v\n%s", what, f, p.history())
	}
	return f
}

// WantWindowUpdate waits for a WINDOW_UPDATE on streamID (0: connection) and
// returns its increment. WINDOW_UPDATEs on other streams are passed over.
func (p *Peer) WantWindowUpdate(streamID uint32) uint32 {
	p.T.Helper()
	what := fmt.Sprintf("WINDOW_UPDATE stream=%d", streamID)
	for {
		f := p.next(h2frame.TypeWindowUpdate, what)
		if f.StreamID == streamID {
			return f.Increment()
		}
	}
}

// Headers is a decoded header block.
type Headers struct {
	StreamID  uint32
	Fields    []hpack.HeaderField
	EndStream bool
}

// Get returns the value of the first field named name ("" when absent).
func (h Headers) Get(name string) string {
	v, _ := Header(h.Fields, name)
	return v
}

// WantHeaders waits for a HEADERS frame on streamID, gathers its
// CONTINUATION frames (nothing else may come between), and decodes the
// block.
func (p *Peer) WantHeaders(streamID uint32) Headers {
	p.T.Helper()
	what := fmt.Sprintf("HEADERS stream=%d", streamID)
	f := p.next(h2frame.TypeHeaders, what)
	if f.StreamID != streamID {
		p.T.Fatalf("h2test: want %s, got %v\n%s", what, f, p.history())
	}
	block := append([]byte(nil), f.BlockFragment()...)
	for end := f.Flags.Has(h2frame.FlagEndHeaders); !end; {
		c, err := p.ReadFrame(p.timeout())
		if err != nil {
			p.T.Fatalf("h2test: want CONTINUATION stream=%d: %v\n%s", streamID, err, p.history())
		}
		if c.Type != h2frame.TypeContinuation || c.StreamID != streamID {
			p.T.Fatalf("h2test: want CONTINUATION stream=%d, got %v\n%s", streamID, c, p.history())
		}
		block = append(block, c.Payload...)
		end = c.Flags.Has(h2frame.FlagEndHeaders)
	}
	if p.Decoder == nil {
		p.Decoder = NewLeanDecoder()
	}
	fields, err := p.Decoder.DecodeBlock(block)
	if err != nil {
		p.T.Fatalf("h2test: HEADERS stream=%d: bad header block: %v", streamID, err)
	}
	return Headers{StreamID: streamID, Fields: fields, EndStream: f.EndStream()}
}

// WantData waits for a DATA frame on streamID and returns it.
func (p *Peer) WantData(streamID uint32) *Frame {
	p.T.Helper()
	what := fmt.Sprintf("DATA stream=%d", streamID)
	f := p.next(h2frame.TypeData, what)
	if f.StreamID != streamID {
		p.T.Fatalf("h2test: want %s, got %v\n%s", what, f, p.history())
	}
	return f
}

// WantBody reads DATA frames on streamID until one with END_STREAM, giving
// back their flow-control credit on the stream and the connection after each
// frame when grant is set, and returns the data.
func (p *Peer) WantBody(streamID uint32, grant bool) []byte {
	p.T.Helper()
	var body []byte
	for {
		f := p.WantData(streamID)
		body = append(body, f.Data()...)
		if grant && f.Length > 0 {
			p.WriteWindowUpdate(0, f.Length)
			if !f.EndStream() {
				p.WriteWindowUpdate(streamID, f.Length)
			}
		}
		if f.EndStream() {
			return body
		}
	}
}

// WantBodyTrailers reads the rest of a stream: DATA frames on streamID
// (granting their credit back when grant is set) until END_STREAM, on DATA
// or on a trailing HEADERS, which it decodes and returns.
func (p *Peer) WantBodyTrailers(streamID uint32, grant bool) (body []byte, trailers Headers) {
	p.T.Helper()
	what := fmt.Sprintf("DATA or trailers on stream %d", streamID)
	for {
		f := p.nextOf(what, h2frame.TypeData, h2frame.TypeHeaders)
		if f.StreamID != streamID {
			p.T.Fatalf("h2test: want %s, got %v\n%s", what, f, p.history())
		}
		if f.Type == h2frame.TypeHeaders {
			p.pending = append([]*Frame{f}, p.pending...)
			tr := p.WantHeaders(streamID)
			if !tr.EndStream {
				p.T.Fatalf("h2test: trailers on stream %d without END_STREAM", streamID)
			}
			return body, tr
		}
		body = append(body, f.Data()...)
		if grant && f.Length > 0 {
			p.WriteWindowUpdate(0, f.Length)
			if !f.EndStream() {
				p.WriteWindowUpdate(streamID, f.Length)
			}
		}
		if f.EndStream() {
			return body, Headers{StreamID: streamID}
		}
	}
}

// WantClosed waits for the remote end to close the connection. GOAWAY and the
// frames Ignore allows may come first; anything else fails the test.
func (p *Peer) WantClosed() {
	p.T.Helper()
	deadline := time.Now().Add(p.timeout())
	for {
		f, err := p.ReadFrame(time.Until(deadline))
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				p.T.Fatalf("h2test: want the connection closed: still open after %v\n%s", p.timeout(), p.history())
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe) {
				p.T.Logf("h2test: connection ended with %v", err)
			}
			return
		}
		if f.Type == h2frame.TypeGoAway || p.skip(f) {
			continue
		}
		p.T.Fatalf("h2test: want the connection closed, got %v\n%s", f, p.history())
	}
}

// WantNothing checks that no frame other than those Ignore allows arrives
// within d and that the connection stays open.
func (p *Peer) WantNothing(d time.Duration) {
	p.T.Helper()
	deadline := time.Now().Add(d)
	for {
		f, err := p.ReadFrame(time.Until(deadline))
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
			p.T.Fatalf("h2test: want nothing for %v: connection ended: %v\n%s", d, err, p.history())
		}
		if p.skip(f) {
			continue
		}
		p.T.Fatalf("h2test: want nothing for %v, got %v\n%s", d, f, p.history())
	}
}

// Greet runs the connection preface for the peer's role with the given
// SETTINGS, checking that the remote end's first frame is SETTINGS,
// acknowledging it and waiting for the ACK of ours. Frames the remote end
// sends meanwhile (a client's first HEADERS, say) stay queued for the next
// Want.
func (p *Peer) Greet(settings ...h2frame.Setting) {
	p.T.Helper()
	if p.Role == ClientRole {
		p.WritePreface()
		p.WriteSettings(settings...)
	} else {
		p.wantPreface()
	}
	f, err := p.readWire(p.timeout())
	if err != nil {
		p.T.Fatalf("h2test: greet: want the remote SETTINGS: %v\n%s", err, p.history())
	}
	if f.Type != h2frame.TypeSettings || f.IsAck() || f.StreamID != 0 {
		p.T.Fatalf("h2test: greet: the remote end's first frame must be SETTINGS, got %v", f)
	}
	if p.Role == ServerRole {
		p.WriteSettings(settings...)
	}
	p.WriteSettingsAck()
	deadline := time.Now().Add(p.timeout())
	for {
		f, err := p.readWire(time.Until(deadline))
		if err != nil {
			p.T.Fatalf("h2test: greet: want SETTINGS ACK: %v\n%s", err, p.history())
		}
		if f.Type == h2frame.TypeSettings && f.IsAck() {
			p.unacked--
			break
		}
		if f.Type == h2frame.TypeWindowUpdate && p.Ignore[h2frame.TypeWindowUpdate] {
			continue
		}
		p.pending = append(p.pending, f)
	}
	p.greeted = true
}

func (p *Peer) wantPreface() {
	p.T.Helper()
	deadline := time.Now().Add(p.timeout())
	for len(p.rbuf) < len(ClientPreface) {
		p.Conn.SetReadDeadline(deadline)
		var tmp [64]byte
		n, err := p.Conn.Read(tmp[:])
		p.rbuf = append(p.rbuf, tmp[:n]...)
		if err != nil {
			p.T.Fatalf("h2test: want the client preface: %v (got %q)", err, p.rbuf)
		}
	}
	if string(p.rbuf[:len(ClientPreface)]) != ClientPreface {
		p.T.Fatalf("h2test: bad client preface %q", p.rbuf[:len(ClientPreface)])
	}
	p.rbuf = p.rbuf[len(ClientPreface):]
}

// Close closes the connection.
func (p *Peer) Close() { p.Conn.Close() }
