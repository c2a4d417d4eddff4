package h2conn

import (
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/sockio"
)

// Conn is one HTTP/2 connection, client or server.
//
// Ownership: the reading goroutine owns fr and the fields marked "owned by
// the run loop"; whoever holds the write role (writing == true) owns fw;
// everything else is guarded by mu.
type Conn struct {
	nc net.Conn
	// resume is resumeReader bound once, handed to OnReadable each time the
	// reader leaves an idle connection: set, under mu, by the reader's
	// first wait that may go idle, and nil on a connection that never
	// does (Release reads it).
	resume  func()
	cfg     *Config // normalized, shared by the conns of one configuration; read-only
	handler Handler

	fr  *h2frame.Reader // owned by the run loop
	src *readSource     // fr's source on a socket with pooled reads, nil otherwise (reader.go); owned with fr

	// notify holds the Done and GoingAway channels, made on demand, and
	// ServeAsync's onEnd (nil until one is needed); guarded by mu, onEnd
	// set before the reader starts. state holds whether no new streams
	// are accepted (stateAway: goingAway is or will be closed) and whether
	// finish ran (stateEnded: done is or will be closed); set under mu,
	// read without it by IsGoingAway and Ended. statePrefaced is set by
	// the reader, read by the preface timer.
	notify *connNotify
	state  atomic.Uint32 // stateAway | stateEnded | statePrefaced

	// Owned by the run loop (fields are ordered to pack small ones).
	emptyData  int16        // consecutive empty DATA frames (at most maxEmptyDataFrames+1)
	resetCount int16        // resets within the current rateWindow (at most maxResetsPerWindow+oversizedListWeight)
	inflow     inflow       // connection receive window; given back on receipt
	lastRead   atomic.Int64 // unix nanoseconds of the end of the last batch of frames read, when keepaliveOn

	mu       connMutex // mutex.go: sync.Mutex without starvation mode
	idleCond waitCond  // signalled when writing becomes false; uses mu

	// Guarded by mu.
	closeErr   *Error
	streams    map[uint32]*Stream // nil until the first stream and again once idle
	outflow    outflow
	ctrl       []ctrlFrame
	ready      readyList
	rare       *rareState // nil until a rare moment needs it, and again once idle
	lastPingAt int64      // unix nanoseconds of the peer's last PING; 0: none yet
	// bdp is the BDP estimator, made once a stream window's worth of DATA
	// arrived (bdpBytes counts it until then), so that connections of
	// small calls never hold one.
	bdp         *bdpEstimator
	freeStreams []*Stream // released streams kept for reuse

	peer peerSettings // guarded by mu

	timers timers // guarded by mu

	// Small fields, packed; guarded by mu unless marked.
	nextID         uint32        // next stream id we would open (client)
	maxPeerID      uint32        // highest stream id the peer opened
	numLocal       int32         // open streams we initiated
	numPeer        int32         // open streams the peer initiated
	peerControl    int32         // entries of ctrl queued in reply to the peer
	streamWindow   atomic.Uint32 // our current SETTINGS_INITIAL_WINDOW_SIZE; changed under mu, read by receivers under their rmu
	connWindow     uint32        // our current connection receive window (cfg.InitialConnWindow, raised by BDP)
	goAwayLastID   uint32        // last stream id of the GOAWAY we sent
	peerGoAwayCode h2frame.ErrCode
	pingStrikes    int16
	settingsCount  int16 // owned by the run loop: the peer's SETTINGS (ACKs aside) within the current rateWindow (at most maxSettingsPerWindow+1)
	// parked counts goroutines parked in waitRecvLocked or waitSendLocked
	// (reader.go). It goes up under mu; a receiver that finds its wait
	// over takes itself off under its stream's rmu (clearStaleWaitRx).
	parked atomic.Int32
	// readRole is who holds the read role, and more: a roleWord (reader.go).
	readRole  atomic.Uint32
	bdpBytes  uint32 // DATA bytes received while bdp is nil
	rateStart uint32 // owned by the run loop: milliseconds since clockEpoch (mod 2^32) the current rateWindow began
	// recentClosed holds the closedTag of recently closed peer stream ids
	// (peer ids share their parity), a ring at recentNext: an id matches
	// exactly when it is within 2^17 of one remembered; an older one may
	// match by its low bits, which only picks STREAM_CLOSED over
	// PROTOCOL_ERROR for a HEADERS on an id that is closed either way.
	recentClosed [recentClosedIDs]uint16
	// recentReset has bit i set when recentClosed[i] is a stream we
	// reset (or ended with RST_STREAM NO_ERROR before its request was
	// complete): DATA the peer had sent before our RST_STREAM reached it
	// is ignored on those (RFC 9113 §5.1, "closed").
	recentReset   uint16
	recentNext    uint8
	shutdownPhase int8 // 0 none, 1 first GOAWAY + PING sent, 2 final GOAWAY sent
	role          Role // set once
	sawSettings   bool // owned by the run loop
	keepaliveOn   bool // keepalive pings are configured; set before the reader starts
	writing       bool // someone holds the write role
	closing       bool // the connection is ending; no new work
	goAwaySent    bool
	goAwayRecv    bool
	resetStrikes  bool // we sent HEADERS or DATA since the last PING: strikes restart
	settingsAcked bool
	wantWrite     bool // something new became writable since the writer last looked
	heldBatch     bool // the unflushed bytes in fw are all held writes of one stream
	drainStarted  bool // drainedLocked started the final close
	// idleCredit sets the reader's idle wait (see minIdleReadWait). Written
	// under mu by the reader, which alone may read it without.
	idleCredit uint8
	// noOfferLeft counts down the batches a connection reads the usual way
	// after a bounded wait of an offered role ran out (reader.go); guarded by mu.
	noOfferLeft uint8

	// inline is the stream whose RunInline handler waits for the batch to
	// end (owned by the read role's holder; reader.go).
	inline *Stream

	// fw is owned by the holder of the write role. It lives inside Conn,
	// not behind a pointer: every connection has one for its whole life,
	// and an allocation of its own would cost each a second object. It
	// comes last, away from the fields the reader writes on every read
	// (lastRead, inflow, the flood counters), so that the writer's and
	// the reader's stores do not share a cache line.
	fw h2frame.Writer
}

// rareState holds what a connection needs only at rare moments: while
// our SETTINGS wait to be written, around a GOAWAY either way, and while a
// client waits for a stream slot. It is made on first need and dropped by
// trimIdleLocked once nothing in it is live, so that the Conn of an idle
// connection stays in a smaller size class. Guarded by mu.
type rareState struct {
	localSettings   []h2frame.Setting // payload of the next SETTINGS we send; dropped when idle
	goAwayDebug     string            // debug data of the queued GOAWAY
	peerGoAwayDebug string            // its debug data
	slotFree        chan struct{}     // closed when a local stream slot frees; nil when nobody waits
	shutdown        *time.Timer       // second phase of a graceful shutdown
	drain           *time.Timer       // close after the peer's GOAWAY if it does not
}

// rareLocked returns c.rare, made if need be.
func (c *Conn) rareLocked() *rareState {
	if c.rare == nil {
		c.rare = new(rareState)
	}
	return c.rare
}

// dropRareLocked drops c.rare when nothing in it is live.
func (c *Conn) dropRareLocked() {
	r := c.rare
	if r == nil || len(r.localSettings) > 0 || r.goAwayDebug != "" || r.peerGoAwayDebug != "" ||
		r.slotFree != nil || r.shutdown != nil || r.drain != nil {
		return
	}
	c.rare = nil
}

// peerSettings are the peer's SETTINGS as last received.
type peerSettings struct {
	headerTableSize      uint32
	maxConcurrentStreams uint32
	initialWindowSize    uint32
	maxFrameSize         uint32
	maxHeaderListSize    uint32
	enablePush           uint32
	// applied* are the values the writer passed to fw; the writer applies
	// changes before encoding the next frame.
	appliedFrameSize uint32
	appliedTableSize uint32
}

var errLocalClose = &Error{Code: h2frame.ErrCodeNo, Initiator: InitiatorUser, Reason: "closed", Cause: net.ErrClosed}

func (cfg *Config) normalize() {
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if cfg.InitialStreamWindow == 0 {
		cfg.InitialStreamWindow = DefaultInitialStreamWindow
	}
	cfg.InitialStreamWindow = min(cfg.InitialStreamWindow, h2frame.MaxWindowSize)
	if cfg.InitialConnWindow == 0 {
		cfg.InitialConnWindow = DefaultInitialConnWindow
	}
	cfg.InitialConnWindow = min(max(cfg.InitialConnWindow, h2frame.DefaultInitialWindow), h2frame.MaxWindowSize)
	if cfg.MaxFrameSize == 0 {
		cfg.MaxFrameSize = h2frame.MinMaxFrameSize
	}
	cfg.MaxFrameSize = min(max(cfg.MaxFrameSize, h2frame.MinMaxFrameSize), h2frame.MaxMaxFrameSize)
	if cfg.MaxHeaderListSize == 0 {
		cfg.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	if cfg.HeaderTableSize == 0 {
		cfg.HeaderTableSize = h2frame.DefaultHeaderTableLen
	}
	if cfg.Pool == nil {
		cfg.Pool = bufpool.Default()
	}
	if cfg.SettingsTimeout == 0 {
		cfg.SettingsTimeout = DefaultSettingsTimeout
	}
	if cfg.PrefaceTimeout == 0 {
		cfg.PrefaceTimeout = DefaultPrefaceTimeout
	}
	if cfg.KeepaliveTimeout == 0 {
		cfg.KeepaliveTimeout = defaultKeepaliveTimeout
	}
	if cfg.ServerKeepaliveTimeout == 0 {
		cfg.ServerKeepaliveTimeout = defaultKeepaliveTimeout
	}
	if cfg.PingMinTime == 0 {
		cfg.PingMinTime = defaultPingMinTime
	}
	if cfg.WriteBatchBytes <= 0 {
		cfg.WriteBatchBytes = DefaultWriteBatchBytes
	}
}

// configs interns normalized configurations: the conns of a server (or of
// a ClientConn) share one copy instead of holding 144 bytes each.
var configs struct {
	sync.Mutex
	m map[Config]*Config
}

// maxInternedConfigs bounds configs. Past it an arbitrary entry makes room:
// conns already holding it keep their copy, and a process that keeps
// creating configurations (new pools, say) neither pins them forever nor
// stops sharing.
const maxInternedConfigs = 64

// internConfig returns the shared copy of cfg (normalized).
func internConfig(cfg Config) *Config {
	configs.Lock()
	defer configs.Unlock()
	if p := configs.m[cfg]; p != nil {
		return p
	}
	// A copy made here, not &cfg: taking the parameter's address would
	// move it to the heap on every call, found or not, and every
	// connection and ClientConn calls this.
	p := new(Config)
	*p = cfg
	if configs.m == nil {
		configs.m = make(map[Config]*Config)
	}
	if len(configs.m) >= maxInternedConfigs {
		for k := range configs.m {
			delete(configs.m, k)
			break
		}
	}
	configs.m[cfg] = p
	return p
}

func newConn(nc net.Conn, cfg Config, role Role, h Handler) *Conn {
	cfg.normalize()
	// Where the connection is made says where it lives: the engine's
	// tests make theirs inside synctest bubbles, servers and clients
	// outside.
	cfg.inBubble = inSynctestBubble()
	wc := sockio.Wrap(nc, cfg.PooledReads)
	c := &Conn{
		nc:      wc,
		role:    role,
		cfg:     internConfig(cfg),
		handler: h,
	}
	var src io.Reader = wc
	if rs, ok := wc.(readySocket); ok && cfg.PooledReads {
		c.src = &readSource{sock: rs, conn: c}
		if fs, ok := rs.(fullSocket); ok {
			fs.SetLowWater(cfg.RecvLowWater)
			if role == RoleServer && cfg.FrameStallTimeout > 0 {
				c.src.onProgress = c.src.progress
			}
			c.src.full = fs
		}
		src = c.src
	}
	c.fr = h2frame.NewReader(src, h2frame.ReaderConfig{
		Pool:               cfg.Pool,
		MaxFrameSize:       cfg.MaxFrameSize,
		MaxHeaderListSize:  cfg.MaxHeaderListSize,
		MaxHeaderTableSize: cfg.HeaderTableSize,
		NoPooledReads:      !cfg.PooledReads,
		Ledger:             newLedger(&cfg, role),
	})
	c.fr.SetDataSink((*connSink)(c)) // DATA of a gathered message lands in its buffer (sink.go)
	c.fw.Init(wc, h2frame.WriterConfig{Pool: cfg.Pool})
	c.peer = peerSettings{
		headerTableSize:      h2frame.DefaultHeaderTableLen,
		maxConcurrentStreams: initialPeerMaxStreams,
		initialWindowSize:    h2frame.DefaultInitialWindow,
		maxFrameSize:         h2frame.MinMaxFrameSize,
		maxHeaderListSize:    ^uint32(0),
		enablePush:           1,
		appliedFrameSize:     h2frame.MinMaxFrameSize,
		appliedTableSize:     h2frame.DefaultHeaderTableLen,
	}
	c.outflow.n = h2frame.DefaultInitialWindow
	c.inflow.init(cfg.InitialConnWindow)
	c.connWindow = cfg.InitialConnWindow
	c.streamWindow.Store(cfg.InitialStreamWindow)
	if role == RoleClient {
		c.nextID = 1
	} else {
		c.nextID = 2
	}
	now := time.Now().UnixNano()
	every, _, _ := c.keepaliveParams()
	c.keepaliveOn = every > 0
	c.lastRead.Store(now)
	return c
}

// startClient writes the preface and SETTINGS (on the caller's goroutine)
// and starts the reader.
func (c *Conn) startClient() error {
	c.mu.Lock()
	c.writing = true
	c.fw.WritePreface()
	c.queueInitialSettingsLocked()
	c.writeLoop(nil)
	err := c.closeErr
	if err == nil {
		c.startTimersLocked()
	}
	c.mu.Unlock()
	if err != nil {
		c.finish()
		return err
	}
	go c.runReader()
	return nil
}

// end ends the connection from the reader goroutine.
func (c *Conn) end(err *Error) {
	c.fail(err)
	c.finish()
	c.runOnEnd()
}

// runOnEnd runs ServeAsync's onEnd, or the handler's ConnEnded when onEnd
// is nil.
func (c *Conn) runOnEnd() {
	var onEnd func()
	c.mu.Lock()
	if c.notify != nil {
		onEnd = c.notify.onEnd
	}
	c.mu.Unlock()
	if onEnd != nil {
		onEnd()
	} else if eh, ok := c.handler.(EndHandler); ok {
		eh.ConnEnded(c)
	}
}

// ServeAsync is Serve that may return before the connection ends: it
// returns when the connection goes idle, its reader then waiting for bytes
// without a goroutine (when the socket supports it; otherwise it returns
// when the connection ends). onEnd runs once the connection has ended and
// its reader stopped, on the goroutine that ended it (Done is closed by
// then). A nil onEnd with a handler that is an EndHandler calls its
// ConnEnded instead.
//
// serveAsync is serve that returns as soon as the connection goes idle
// (its reader then waits through OnReadable, without a goroutine), or
// when it ends; onEnd runs once the connection has ended, on whichever
// goroutine ends it.
func (c *Conn) ServeAsync(onEnd func()) {
	c.registerLedger()
	if onEnd != nil {
		c.mu.Lock()
		c.notifyLocked().onEnd = onEnd
		c.mu.Unlock()
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		c.finish()
		c.runOnEnd()
		return
	}
	c.queueInitialSettingsLocked()
	c.startTimersLocked()
	c.ensureWriterLocked()
	c.mu.Unlock()
	if _, _, ok := c.greetingSocket(); ok {
		c.src.awaiting = true
		c.awaitGreeting()
		return
	}
	if perr := c.fr.ReadPreface(); perr != nil {
		c.end(c.readError(perr))
		return
	}
	c.runReader()
}

// Serve reads the client preface and runs the connection's read loop on the
// calling goroutine until the connection ends. It returns nil after a
// graceful end (GOAWAY exchanged, or Close), else the error that ended the
// connection (an *Error).
func (c *Conn) Serve() error {
	c.registerLedger()
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		c.finish()
		return nil
	}
	c.queueInitialSettingsLocked()
	c.startTimersLocked()
	c.ensureWriterLocked()
	c.mu.Unlock()
	var err *Error
	if perr := c.fr.ReadPreface(); perr != nil {
		err = c.readError(perr)
	} else {
		err, _ = c.readLoop(false)
	}
	c.fail(err)
	c.finish()
	c.mu.Lock()
	final := c.closeErr
	c.mu.Unlock()
	if final == nil || final.graceful() {
		return nil
	}
	return final
}

// graceful reports whether the connection ended without a fault.
func (e *Error) graceful() bool {
	return e.Code == h2frame.ErrCodeNo && e.Initiator != InitiatorEngine
}

// finish runs once on the reading goroutine after fail: it releases the
// read side and marks the connection done.
func (c *Conn) finish() {
	c.fr.Close()
	// The read side is released; what handlers have not read yet stays
	// charged until they free it.
	c.ledger().Close()
	if c.src != nil {
		c.src.close()
	}
	c.mu.Lock()
	c.state.Or(stateEnded)
	if n := c.notify; n != nil && n.done != nil {
		close(n.done)
	}
	c.mu.Unlock()
}

// Done is closed when the connection has ended and its reader stopped.
//
// doneChan is Done.
func (c *Conn) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.notifyLocked()
	if n.done == nil {
		n.done = make(chan struct{})
		if c.Ended() {
			close(n.done)
		}
	}
	return n.done
}

// connNotify holds a Conn's Done and GoingAway channels, which few conns
// are ever asked for; guarded by the Conn's mu.
type connNotify struct {
	done      chan struct{} // closed when the reader stopped and all is released
	goingAway chan struct{} // closed once no new streams are accepted
	onEnd     func()        // ServeAsync's; set before the reader starts
	onAway    func()        // OnGoingAway's; run once when goingAway closes
}

// notifyLocked returns c.notify, making it if needed.
func (c *Conn) notifyLocked() *connNotify {
	if c.notify == nil {
		c.notify = new(connNotify)
	}
	return c.notify
}

// readError converts an error from the frame reader into the error that
// ends the connection.
func (c *Conn) readError(err error) *Error {
	var ce h2frame.ConnError
	if errors.As(err, &ce) {
		return &Error{Code: ce.Code, Initiator: InitiatorEngine, Reason: ce.Reason}
	}
	c.mu.Lock()
	ce2 := c.closeErr
	goaway := c.goAwayRecv
	c.mu.Unlock()
	if ce2 != nil {
		return ce2
	}
	if goaway {
		c.mu.Lock()
		e := c.peerGoAwayErrLocked()
		c.mu.Unlock()
		e.Cause = err
		return e
	}
	reason := "read"
	if err == io.EOF {
		reason = "eof"
	}
	return &Error{Code: h2frame.ErrCodeNo, Initiator: InitiatorPeer, Reason: reason, Cause: err}
}

// handleRead dispatches the frame a read returned, or handles the read's
// error: a stream error resets its stream, any other error is the
// connection's, which it returns.
func (c *Conn) handleRead(f h2frame.Frame, err error, rb *readBatch) *Error {
	if err == nil {
		return c.dispatch(f, rb)
	}
	c.releaseBatch(rb)
	var se h2frame.StreamError
	if !errors.As(err, &se) {
		return c.readError(err)
	}
	return c.onStreamError(se)
}

// dispatch hands f to its handler. Only DATA and HEADERS go on under the
// batch's hold of mu (readbatch.go); the others take it themselves.
func (c *Conn) dispatch(f h2frame.Frame, rb *readBatch) *Error {
	switch f.(type) {
	case *h2frame.DataFrame, *h2frame.HeadersFrame:
		if !c.sawSettings {
			c.releaseBatch(rb)
		}
	default:
		c.releaseBatch(rb)
	}
	if !c.sawSettings {
		sf, ok := f.(*h2frame.SettingsFrame)
		if !ok || sf.IsAck() {
			if df, ok := f.(*h2frame.DataFrame); ok && df.Data != nil {
				df.Data.Free() // the frame's payload; owned by us, dropped
			}
			if df, ok := f.(*h2frame.DataFrame); ok && df.Sink != nil {
				df.Sink.Free() // the landing's reference (sink.go)
			}
			return connErr(h2frame.ErrCodeProtocol, "first_frame_not_settings")
		}
		c.sawSettings = true
		c.state.Or(statePrefaced)
		if c.role == RoleServer {
			c.mu.Lock()
			c.prefacedLocked()
			c.mu.Unlock()
		}
		if gh, ok := c.handler.(GreetHandler); ok && c.role == RoleServer {
			gh.ConnGreeted(c)
		}
		if c.role == RoleClient && !hasSetting(sf, h2frame.SettingMaxConcurrentStreams) {
			// The server's first SETTINGS leaves the limit out: no limit
			// (RFC 9113 §6.5.2), as grpc-go's server does by default. The
			// initial assumption only covered the time before it arrived.
			c.mu.Lock()
			c.peer.maxConcurrentStreams = math.MaxUint32
			c.wakeSlotLocked()
			c.mu.Unlock()
		}
	}
	switch f := f.(type) {
	case *h2frame.DataFrame:
		return c.onData(f, rb)
	case *h2frame.HeadersFrame:
		return c.onHeaders(f, rb)
	case *h2frame.PriorityFrame:
		return nil // accepted and ignored (RFC 9113 §5.3.2)
	case *h2frame.RSTStreamFrame:
		return c.onRSTStream(f)
	case *h2frame.SettingsFrame:
		return c.onSettings(f)
	case *h2frame.PushPromiseFrame:
		// We send ENABLE_PUSH=0 as a client; a server never receives it.
		return connErr(h2frame.ErrCodeProtocol, "push_promise")
	case *h2frame.PingFrame:
		return c.onPing(f)
	case *h2frame.GoAwayFrame:
		return c.onGoAway(f)
	case *h2frame.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	}
	return nil
}

func connErr(code h2frame.ErrCode, reason string) *Error {
	return &Error{Code: code, Initiator: InitiatorEngine, Reason: reason}
}

// isPeerID reports whether id belongs to streams the peer initiates.
func (c *Conn) isPeerID(id uint32) bool {
	if c.role == RoleServer {
		return id&1 == 1
	}
	return id&1 == 0
}

// idleLocked reports whether id names a stream that was never opened.
func (c *Conn) idleLocked(id uint32) bool {
	if c.isPeerID(id) {
		return id > c.maxPeerID
	}
	return id >= c.nextID
}

// wasClosedLocked reports whether id is one of the recently closed peer
// streams.
func (c *Conn) wasClosedLocked(id uint32) bool {
	tag := closedTag(id)
	for _, x := range c.recentClosed {
		if x == tag {
			return true
		}
	}
	return false
}

// wasResetLocked reports whether id is one of the recently closed peer
// streams and we reset it.
func (c *Conn) wasResetLocked(id uint32) bool {
	tag := closedTag(id)
	for i, x := range c.recentClosed {
		if x == tag && c.recentReset&(1<<i) != 0 {
			return true
		}
	}
	return false
}

// closedTag is what recentClosed keeps of a stream id: bits 1-16, plus one
// so that the ring's empty slots (zero) match no small id.
func closedTag(id uint32) uint16 {
	return uint16(id>>1) + 1
}

// onData handles a DATA frame. f.Data is owned by us from here on. With a
// batch (readbatch.go) it may find mu held, and leaves it held on success.
func (c *Conn) onData(f *h2frame.DataFrame, rb *readBatch) *Error {
	if f.Sink != nil {
		defer f.Sink.Free() // the landing's reference, whatever becomes of the frame (sink.go)
	}
	b := f.Data
	id := f.StreamID
	end := f.EndStream()
	// Connection-level accounting first, for every DATA frame (§6.9).
	if !c.inflow.take(f.FlowLen) {
		if b != nil {
			b.Free() // frame payload dropped on a connection error
		}
		return connErr(h2frame.ErrCodeFlowControl, "conn_window_exceeded")
	}
	n := int(f.Landed)
	if b != nil {
		n += b.Len()
	}
	if n == 0 && !end {
		c.emptyData++
		if c.emptyData > maxEmptyDataFrames {
			if b != nil {
				b.Free() // empty payload dropped on a connection error
			}
			return connErr(h2frame.ErrCodeEnhanceYourCalm, "empty_data_flood")
		}
	} else {
		c.emptyData = 0
	}
	c.lockFrame(rb)
	// The connection window is given back on receipt.
	if inc := c.inflow.credit(int(f.FlowLen), c.connWindow); inc > 0 {
		c.queueCtrlLocked(ctrlFrame{kind: ctrlWindowUpdate, id: 0, val: inc}, false)
	}
	if b := c.bdpLocked(f.FlowLen); b != nil {
		ping, grown := b.onData(f.FlowLen, timeNow)
		if ping {
			c.queueCtrlLocked(ctrlFrame{kind: ctrlPing, data: bdpPingData}, false)
		}
		if grown > 0 {
			c.growWindowsLocked(grown)
		}
	}
	s := c.streams[id]
	if s == nil || s.state == stateIdle {
		idle := c.idleLocked(id)
		// DATA the peer sent before our RST_STREAM reached it is
		// ignored, not answered with another reset (RFC 9113 §5.1): a
		// client streaming to a handler that returned early sends some
		// in any case, and answering each would count against the
		// reset limit. On a stream we opened and closed, whose id the
		// ring of peer ids does not hold, the same goes: a client that
		// abandons many calls while their servers stream gets their
		// DATA in flight, and counting it as the server's resets ended
		// the connection with ENHANCE_YOUR_CALM.
		late := !idle && s == nil && (c.wasResetLocked(id) || !c.isPeerID(id))
		c.unlockFrame(rb)
		if b != nil {
			b.Free() // no stream to deliver to
		}
		if idle {
			return connErr(h2frame.ErrCodeProtocol, "data_on_idle_stream")
		}
		if late {
			return nil
		}
		return c.resetStream(id, h2frame.ErrCodeStreamClosed, "data_on_closed_stream")
	}
	if s.local && !s.gotHeaders {
		c.unlockFrame(rb)
		if b != nil {
			b.Free() // frame payload refused
		}
		// A response starts with HEADERS (RFC 9113 §8.1).
		return c.resetStream(id, h2frame.ErrCodeProtocol, "data_before_response_headers")
	}
	st, terr := s.state.recvData(end)
	if terr != nil {
		c.unlockFrame(rb)
		if b != nil {
			b.Free() // frame payload refused
		}
		return c.resetStream(id, h2frame.ErrCodeStreamClosed, "data_on_half_closed_stream")
	}
	s.recvBytes += int64(n)
	if s.contentLength >= 0 && (s.recvBytes > s.contentLength || (end && s.recvBytes != s.contentLength)) {
		c.unlockFrame(rb)
		if b != nil {
			b.Free() // frame payload refused
		}
		return c.resetStream(id, h2frame.ErrCodeProtocol, "content_length_mismatch")
	}
	if !c.deliverLocked(s, f, b, n, end, rb) { // takes ownership of b
		c.unlockFrame(rb)
		return c.resetStream(id, h2frame.ErrCodeFlowControl, "stream_window_exceeded")
	}
	c.setStateLocked(s, st)
	c.doneFrame(rb, s.takeArrivalLocked())
	return nil
}

// resetStream answers a stream error found by the engine: RST_STREAM with
// code, and the stream (if it still exists) fails. It returns a connection
// error when the peer causes too many resets.
func (c *Conn) resetStream(id uint32, code h2frame.ErrCode, reason string) *Error {
	if cerr := c.countReset(); cerr != nil {
		return cerr
	}
	c.mu.Lock()
	if c.isPeerID(id) && id > c.maxPeerID {
		c.maxPeerID = id
		c.rememberClosedLocked(id, true)
	}
	var hook func(error)
	var err *Error
	if s := c.streams[id]; s != nil {
		err = &Error{Code: code, StreamID: id, Initiator: InitiatorEngine, Reason: reason}
		hook = c.failStreamLocked(s, err)
	}
	c.queueCtrlLocked(ctrlFrame{kind: ctrlRST, id: id, code: code}, true)
	cerr := c.ctrlQueueErrLocked()
	c.mu.Unlock()
	if hook != nil {
		hook(err)
	}
	return cerr
}

// countReset enforces maxResetsPerWindow.
func (c *Conn) countReset() *Error { return c.countResets(1) }

// countResets counts n resets against maxResetsPerWindow.
func (c *Conn) countResets(n int16) *Error {
	c.rollRateWindow()
	c.resetCount += n
	if c.resetCount > maxResetsPerWindow {
		return connErr(h2frame.ErrCodeEnhanceYourCalm, "reset_flood")
	}
	return nil
}

// rollRateWindow starts a new rateWindow, with every count of the limits
// per window at zero, once the current one has passed.
func (c *Conn) rollRateWindow() {
	now := uint32(time.Since(clockEpoch).Milliseconds())
	if time.Duration(now-c.rateStart)*time.Millisecond > rateWindow { // mod 2^32: exact below 49 days
		c.rateStart, c.resetCount, c.settingsCount = now, 0, 0
	}
}

func (c *Conn) onStreamError(se h2frame.StreamError) *Error {
	return c.resetStream(se.StreamID, se.Code, se.Reason)
}

func (c *Conn) onRSTStream(f *h2frame.RSTStreamFrame) *Error {
	id := f.StreamID
	c.mu.Lock()
	s := c.streams[id]
	if s == nil {
		idle := c.idleLocked(id)
		c.mu.Unlock()
		if idle {
			return connErr(h2frame.ErrCodeProtocol, "rst_on_idle_stream")
		}
		return nil // already closed: nothing to do
	}
	if _, terr := s.state.recvReset(); terr != nil {
		c.mu.Unlock()
		return connErr(h2frame.ErrCodeProtocol, "rst_on_idle_stream")
	}
	err := &Error{Code: f.Code, StreamID: id, Initiator: InitiatorPeer, Reason: "rst_stream",
		Unprocessed: f.Code == h2frame.ErrCodeRefusedStream}
	weight := int16(1)
	if s.arrival != nil {
		weight = unstartedResetWeight // reset before its request came (limits.go)
	}
	hook := c.failStreamLocked(s, err)
	c.mu.Unlock()
	if hook != nil {
		hook(err)
	}
	if c.isPeerID(id) {
		return c.countResets(weight)
	}
	return nil
}

func (c *Conn) onWindowUpdate(f *h2frame.WindowUpdateFrame) *Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		if !c.outflow.add(int64(f.Increment)) {
			return connErr(h2frame.ErrCodeFlowControl, "conn_window_overflow")
		}
		if c.ready.n > 0 {
			c.wantWrite = true
		}
		return nil
	}
	s := c.streams[f.StreamID]
	if s == nil {
		if c.idleLocked(f.StreamID) {
			return connErr(h2frame.ErrCodeProtocol, "window_update_on_idle_stream")
		}
		return nil
	}
	if s.state.recvWindowUpdate() != nil {
		return connErr(h2frame.ErrCodeProtocol, "window_update_on_idle_stream")
	}
	if !s.out.add(int64(f.Increment)) {
		c.mu.Unlock()
		cerr := c.resetStream(f.StreamID, h2frame.ErrCodeFlowControl, "stream_window_overflow")
		c.mu.Lock()
		return cerr
	}
	if s.slot.pending() {
		c.readyLocked(s)
	}
	return nil
}

// rememberClosedLocked records a closed peer stream id, and whether we
// reset it.
func (c *Conn) rememberClosedLocked(id uint32, reset bool) {
	i := c.recentNext
	c.recentClosed[i] = closedTag(id)
	c.recentReset &^= 1 << i
	if reset {
		c.recentReset |= 1 << i
	}
	c.recentNext = (i + 1) % recentClosedIDs
}

// NumActiveStreams reports the streams open or half-closed on the
// connection, of both initiators.
//
// numActiveStreams counts open streams of both initiators.
func (c *Conn) NumActiveStreams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.numLocal + c.numPeer)
}

// Err returns the error that ended the connection, or nil while it is up.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeErr == nil {
		return nil
	}
	return c.closeErr
}

// closeWith ends the connection from a goroutine other than the reader.
func (c *Conn) closeWith(err *Error) { c.fail(err) }

// fail ends the connection with err (first caller wins): every stream
// fails, a GOAWAY goes out when the engine or the user initiated the end,
// the socket closes. It must be called without mu held and never by the
// holder of the write role. The reader's finish releases the read side.
func (c *Conn) fail(err *Error) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.closeErr = err
	c.stopTimersLocked()
	if !err.graceful() {
		// Nothing queued goes out any more (the GOAWAY below is written
		// directly): the memory goes now, not after a flush in progress
		// against a peer that may not read.
		c.dropCtrlLocked()
	}
	c.closeGoingAwayLocked()
	sendGoAway := err.Initiator != InitiatorPeer && !(c.goAwaySent && err.Code == h2frame.ErrCodeNo)
	// Bound a flush in progress (and ours) against a peer that does not
	// read.
	c.nc.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
	if !sendGoAway && !err.graceful() {
		// Nothing more to say to the peer: unblock a flush in progress.
		c.nc.Close()
	}
	for c.writing {
		c.idleCond.Wait(&c.mu)
	}
	c.writing = true // the write role is never released again
	if err.graceful() {
		c.applyPeerSettingsLocked()
		c.encodeCtrlLocked() // e.g. the final GOAWAY of a graceful shutdown
	}
	hooks := c.failAllStreamsLocked(err)
	c.wakeSlotLocked()
	c.mu.Unlock()

	if sendGoAway {
		var dbg []byte
		if err != errLocalClose {
			dbg = []byte(err.Reason) // the engine's reason token, or the user's GoAway debug
		}
		c.fw.WriteGoAway(c.lastPeerIDForGoAway(), err.Code, dbg)
	}
	if c.fw.Buffered() > 0 {
		c.fw.Flush()
	}
	c.fw.Close()
	c.nc.Close()
	// If nobody reads, a reader finds the closed socket and finishes.
	c.handOverToReader()
	for _, h := range hooks {
		h.fn(h.err)
	}
}

// lastPeerIDForGoAway is the last peer stream we processed; read after
// closing is set, so maxPeerID no longer changes.
func (c *Conn) lastPeerIDForGoAway() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxPeerID
}

type hookCall struct {
	fn  func(error)
	err error
}

// failAllStreamsLocked fails every stream with a stream-scoped copy of err.
func (c *Conn) failAllStreamsLocked(err *Error) []hookCall {
	var hooks []hookCall
	for _, s := range c.streams {
		serr := &Error{Code: err.Code, StreamID: 0, Initiator: err.Initiator, Reason: err.Reason, Cause: err.Cause}
		if serr.Cause == nil {
			serr.Cause = net.ErrClosed
		}
		h := c.failStreamLocked(s, serr)
		if c.role == RoleServer && s.hasResetHook() && !s.hookDone {
			// A server's handlers hear of every end of the connection,
			// also a local Close (Server.Stop cancels their contexts).
			s.hookDone = true
			if s.arrival != nil {
				s.arrivalReset = true // h is endAwaited: it calls the hook first
			} else {
				h = s.resetFunc()
			}
		}
		if h != nil {
			hooks = append(hooks, hookCall{h, serr})
		}
	}
	c.dropCtrlLocked()
	return hooks
}

// dropCtrlLocked drops the control frames queued for a connection that is
// ending, and gives their memory back.
func (c *Conn) dropCtrlLocked() {
	c.ctrl = c.ctrl[:0]
	c.ledger().Release(int64(c.peerControl) * ctrlFrameBytes)
	c.peerControl = 0
}

func (c *Conn) closeGoingAwayLocked() {
	if c.IsGoingAway() {
		return
	}
	c.state.Or(stateAway)
	if n := c.notify; n != nil {
		if n.goingAway != nil {
			close(n.goingAway)
		}
		if f := n.onAway; f != nil {
			n.onAway = nil
			go f()
		}
	}
}

// GoingAway is closed once the connection accepts no new streams: a GOAWAY
// was received or sent, or the connection ended.
func (c *Conn) GoingAway() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.notifyLocked()
	if n.goingAway == nil {
		n.goingAway = make(chan struct{})
		if c.IsGoingAway() {
			close(n.goingAway)
		}
	}
	return n.goingAway
}

// hasSetting reports whether f carries the setting id.
func hasSetting(f *h2frame.SettingsFrame, id h2frame.SettingID) bool {
	for _, st := range f.Settings {
		if st.ID == id {
			return true
		}
	}
	return false
}

// Bits of Conn.state.
const (
	stateAway     = 1 << iota // closeGoingAwayLocked ran
	stateEnded                // finish ran
	statePrefaced             // server: the client's preface and first SETTINGS came
)

// waitCond is a condition variable like sync.Cond at a third of its size:
// the channel is made by the first waiter. Its methods are called with the
// connection's mu held; Wait takes that mutex as its argument rather than
// keeping a pointer to it.
type waitCond struct {
	ch chan struct{} // closed by Broadcast; nil when nobody waits; guarded by Conn.mu
}

// Broadcast wakes every waiter.
func (w *waitCond) Broadcast() {
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// Wait unlocks mu, waits for the next Broadcast and locks mu again.
func (w *waitCond) Wait(mu *connMutex) {
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	ch := w.ch
	mu.Unlock()
	<-ch
	mu.Lock()
}

// bdpLocked returns the BDP estimator to feed n more DATA bytes to, making
// it once a stream window's worth arrived; nil while fewer did, or when the
// estimate cannot grow anything (DisableBDP, or a window at the limit).
func (c *Conn) bdpLocked(n uint32) *bdpEstimator {
	if c.bdp != nil || n == 0 {
		return c.bdp
	}
	w := c.cfg.InitialStreamWindow
	if c.cfg.DisableBDP || w >= maxBDPWindow {
		return nil
	}
	if uint64(c.bdpBytes)+uint64(n) < uint64(w) {
		c.bdpBytes += n
		return nil
	}
	// The estimator starts where it would have been had it counted from
	// the first byte: the caller's onData completes the first window.
	c.bdp = &bdpEstimator{window: w, limit: maxBDPWindow, since: int64(c.bdpBytes)}
	c.bdpBytes = 0
	return c.bdp
}
