package leangrpc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// A subConn is a balancer's SubConn: at most one HTTP/2 connection to one of
// its addresses, with the states grpc-go's subchannels go through. IDLE
// until the balancer calls Connect; CONNECTING while a dial goroutine tries
// the addresses in order; READY with a connection; TRANSIENT_FAILURE when
// every address failed, then IDLE again after the reconnect backoff (the
// balancer decides whether to connect again); IDLE when a READY connection
// is lost; SHUTDOWN at the end. A connection is watched without a
// goroutine (h2conn's OnGoingAway), so an idle SubConn costs its
// connection and this struct.
type subConn struct {
	// balancer.SubConn is embedded, nil, because grpc-go requires
	// implementations to embed the interface (so it can add methods);
	// every method it has today is implemented below.
	balancer.SubConn

	bw       *balancerWrapper // the balancer that made it; bw.cc is its ClientConn
	listener func(balancer.SubConnState)

	// ready is the connection calls use, readable without mu; it is set
	// and cleared with conn.
	ready atomic.Pointer[readyConn]

	mu    sync.Mutex // guards the fields below
	addrs []resolver.Address
	state connectivity.State
	conn  *h2conn.Conn
	// addr is conn's address, an element of the addrs slice the dial
	// was given: addrs is replaced, never changed in place.
	addr *resolver.Address
	// dialCancel stops the dial in progress; backoff is the timer that
	// ends TRANSIENT_FAILURE; retries counts the failed rounds since the
	// last connection.
	dialCancel context.CancelFunc
	backoff    *time.Timer
	retries    int32
	// notified is the state the balancer was last told, as the health
	// listener's registration checks it.
	notified  connectivity.State
	producers map[balancer.ProducerBuilder]*producerRef
	health    *healthReg // the registered health listener, nil for none

	// What the idle check saw at its last look (connectivity.go).
	idleConn   *h2conn.Conn
	idleNextID uint32
	idleActive bool
}

// producerRef counts the users of a producer built on a SubConn.
type producerRef struct {
	p     balancer.Producer
	refs  int
	close func()
}

func newSubConn(bw *balancerWrapper, addrs []resolver.Address, opts balancer.NewSubConnOptions) *subConn {
	sc := &subConn{
		bw:       bw,
		listener: opts.StateListener,
		addrs:    slices.Clone(addrs),
		state:    connectivity.Idle,
		notified: connectivity.Idle,
	}
	if sc.listener == nil {
		// Balancers that predate StateListener hear through
		// UpdateSubConnState.
		sc.listener = func(s balancer.SubConnState) { bw.bal.UpdateSubConnState(sc, s) }
	}
	return sc
}

// cc is the ClientConn the SubConn belongs to.
func (sc *subConn) cc() *ClientConn { return sc.bw.cc }

func (sc *subConn) String() string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return fmt.Sprintf("SubConn(%v)", sc.addrs)
}

// setStateLocked moves the SubConn to s and queues the balancer's
// notification; mu must be held, and the caller runs the serializer's
// queue (cc.ser.drain) after unlocking. Queuing under mu keeps the
// notifications in the order of the changes.
func (sc *subConn) setStateLocked(s connectivity.State, err error) {
	if sc.state == connectivity.Shutdown {
		return
	}
	sc.state = s
	st := balancer.SubConnState{ConnectivityState: s, ConnectionError: err}
	sc.cc().ser.enqueue(func() { sc.notify(st) })
}

// notify tells the balancer of a state change, unless the balancer has
// been closed since. Producers and the health listener belong to the
// state they were made in: both end with it, as in grpc-go.
func (sc *subConn) notify(st balancer.SubConnState) {
	if sc.bw.isClosed() {
		return
	}
	sc.closeProducers()
	sc.mu.Lock()
	sc.notified = st.ConnectivityState
	h := sc.health
	sc.health = nil
	sc.mu.Unlock()
	h.stop()
	sc.listener(st)
}

// Connect starts connecting an IDLE SubConn; it does nothing in any other
// state.
func (sc *subConn) Connect() {
	sc.mu.Lock()
	if sc.state == connectivity.Idle {
		sc.startDialLocked()
	}
	sc.mu.Unlock()
	sc.cc().ser.drainAsync()
}

// startDialLocked starts a dial goroutine over the addresses; mu must be
// held.
func (sc *subConn) startDialLocked() {
	ctx, cancel := context.WithCancel(context.Background())
	sc.dialCancel = cancel
	sc.setStateLocked(connectivity.Connecting, nil)
	go sc.dial(ctx, sc.addrs)
}

// dial tries the addresses in order and publishes the first connection
// made; when all fail, the SubConn enters TRANSIENT_FAILURE for the
// reconnect backoff and the resolver is asked again.
func (sc *subConn) dial(ctx context.Context, addrs []resolver.Address) {
	var conn *h2conn.Conn
	var p *peer.Peer
	var addr *resolver.Address
	var err error
	for i := range addrs {
		if conn, p, err = sc.cc().connectAddr(ctx, addrs[i]); err == nil {
			addr = &addrs[i]
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err != nil && ctx.Err() == nil {
		sc.cc().resolveNow()
	}
	sc.mu.Lock()
	if ctx.Err() != nil {
		// Shut down, or the addresses changed: this dial's outcome is
		// not wanted.
		sc.mu.Unlock()
		if conn != nil {
			conn.Close()
		}
		return
	}
	sc.dialCancel = nil
	if err != nil {
		sc.cc().noteConnError(connError{err})
		sc.setStateLocked(connectivity.TransientFailure, connError{err})
		delay := sc.cc().opts.backoff.delay(int(sc.retries))
		sc.retries++
		sc.backoff = time.AfterFunc(delay, sc.backoffDone)
		sc.mu.Unlock()
		sc.cc().ser.drain()
		return
	}
	sc.retries = 0
	sc.conn, sc.addr = conn, addr
	sc.ready.Store(&readyConn{conn: conn, peer: p})
	sc.setStateLocked(connectivity.Ready, nil)
	sc.mu.Unlock()
	conn.OnGoingAway(func() { sc.lost(conn) })
	sc.cc().ser.drain()
}

// connError is a failed dial as a call sees it, worded as grpc-go's
// transport words a connection error.
type connError struct{ err error }

func (e connError) Error() string { return fmt.Sprintf("connection error: desc = %q", e.err.Error()) }
func (e connError) Unwrap() error { return e.err }

// backoffDone ends TRANSIENT_FAILURE: the SubConn is IDLE, and the
// balancer decides whether to connect again.
func (sc *subConn) backoffDone() {
	sc.mu.Lock()
	if sc.state == connectivity.TransientFailure {
		sc.backoff = nil
		sc.setStateLocked(connectivity.Idle, nil)
	}
	sc.mu.Unlock()
	sc.cc().ser.drain()
}

// resetBackoff ends the backoff at once and forgets the failed rounds.
func (sc *subConn) resetBackoff() {
	sc.mu.Lock()
	sc.retries = 0
	if sc.state == connectivity.TransientFailure && sc.backoff != nil {
		sc.backoff.Stop()
		sc.backoff = nil
		sc.setStateLocked(connectivity.Idle, nil)
	}
	sc.mu.Unlock()
	sc.cc().ser.drain()
}

// lost is called when conn stops taking streams (GOAWAY, failure, close):
// the SubConn goes IDLE, as grpc-go's do, and the resolver is asked again.
// The connection finishes its calls and closes by itself.
func (sc *subConn) lost(conn *h2conn.Conn) {
	sc.mu.Lock()
	if sc.conn != conn {
		sc.mu.Unlock()
		return
	}
	sc.conn = nil
	sc.ready.Store(nil)
	sc.setStateLocked(connectivity.Idle, nil)
	sc.mu.Unlock()
	if code, debug, ok := conn.PeerGoAway(); ok && code == h2frame.ErrCodeEnhanceYourCalm && debug == "too_many_pings" {
		sc.cc().pingedTooOften()
	}
	sc.cc().keepDraining(conn)
	sc.cc().resolveNow()
	sc.cc().ser.drain()
}

// UpdateAddresses replaces the addresses. A connection to an address
// still listed is kept; otherwise the connection or the dial in progress
// is given up and a new dial starts.
func (sc *subConn) UpdateAddresses(addrs []resolver.Address) {
	sc.mu.Lock()
	if sc.state == connectivity.Shutdown || sameAddrs(sc.addrs, addrs) {
		sc.mu.Unlock()
		return
	}
	sc.addrs = slices.Clone(addrs)
	var drop *h2conn.Conn
	switch sc.state {
	case connectivity.Ready:
		for _, a := range addrs {
			if a.Addr == sc.addr.Addr && a.ServerName == sc.addr.ServerName {
				sc.mu.Unlock()
				return
			}
		}
		drop = sc.conn
		sc.conn = nil
		sc.ready.Store(nil)
		sc.startDialLocked()
	case connectivity.Connecting:
		sc.dialCancel()
		sc.startDialLocked()
	}
	sc.mu.Unlock()
	if drop != nil {
		drop.GracefulShutdown()
		sc.cc().keepDraining(drop)
	}
	sc.cc().ser.drainAsync()
}

// sameAddrs reports whether a and b list the same addresses in the same
// order, compared as grpc-go compares a connection's addresses: by Addr
// and ServerName.
func sameAddrs(a, b []resolver.Address) bool {
	return slices.EqualFunc(a, b, func(x, y resolver.Address) bool {
		return x.Addr == y.Addr && x.ServerName == y.ServerName
	})
}

// Shutdown ends the SubConn: calls in flight on its connection finish, no
// new ones start, and the balancer hears SHUTDOWN once more.
func (sc *subConn) Shutdown() {
	sc.mu.Lock()
	if sc.state == connectivity.Shutdown {
		sc.mu.Unlock()
		return
	}
	sc.setStateLocked(connectivity.Shutdown, nil)
	conn := sc.conn
	sc.conn = nil
	sc.ready.Store(nil)
	if sc.dialCancel != nil {
		sc.dialCancel()
		sc.dialCancel = nil
	}
	if sc.backoff != nil {
		sc.backoff.Stop()
		sc.backoff = nil
	}
	h := sc.health
	sc.health = nil
	sc.mu.Unlock()
	h.stop()
	sc.closeProducers()
	sc.cc().forgetSubConn(sc)
	if conn != nil {
		conn.GracefulShutdown()
		sc.cc().keepDraining(conn)
	}
	sc.cc().ser.drainAsync()
}

// GetOrBuildProducer returns the producer pb builds on this SubConn,
// building it on first use; the producer sees the SubConn as a
// grpc.ClientConnInterface whose calls run on its connection.
func (sc *subConn) GetOrBuildProducer(pb balancer.ProducerBuilder) (balancer.Producer, func()) {
	sc.mu.Lock()
	if sc.producers == nil {
		sc.producers = make(map[balancer.ProducerBuilder]*producerRef)
	}
	ref := sc.producers[pb]
	if ref == nil {
		sc.mu.Unlock()
		p, closeP := pb.Build(sc)
		sc.mu.Lock()
		if ref = sc.producers[pb]; ref == nil {
			ref = &producerRef{p: p, close: closeP}
			sc.producers[pb] = ref
		} else {
			defer closeP() // built twice at once: keep the first
		}
	}
	ref.refs++
	sc.mu.Unlock()
	var once sync.Once
	return ref.p, func() {
		once.Do(func() {
			sc.mu.Lock()
			ref.refs--
			last := ref.refs == 0 && sc.producers[pb] == ref
			if last {
				delete(sc.producers, pb)
			}
			sc.mu.Unlock()
			if last {
				ref.close()
			}
		})
	}
}

// closeProducers closes every producer: they belong to one state of the
// SubConn.
func (sc *subConn) closeProducers() {
	sc.mu.Lock()
	ps := sc.producers
	sc.producers = nil
	sc.mu.Unlock()
	for _, ref := range ps {
		ref.refs = 0
		ref.close()
	}
}

// errSubConnNotReady is what a producer's call gets on a SubConn without
// a connection, as in grpc-go.
var errSubConnNotReady = status.Error(codes.Unavailable, "SubConn state is not Ready")

// NewStream opens a stream on the SubConn's connection, for producers
// (health checks, out-of-band load reports).
func (sc *subConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if sc.ready.Load() == nil {
		return nil, errSubConnNotReady
	}
	return sc.cc().newStreamOn(ctx, desc, method, sc, opts...)
}

// Invoke makes a unary call on the SubConn's connection.
func (sc *subConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	cs, err := sc.NewStream(ctx, &grpc.StreamDesc{}, method, opts...)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(args); err != nil {
		return err
	}
	return cs.RecvMsg(reply)
}

var (
	_ balancer.SubConn         = (*subConn)(nil)
	_ grpc.ClientConnInterface = (*subConn)(nil)
)
