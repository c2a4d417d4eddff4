// Package budget is the memory budget of a server: one account of the bytes
// held on behalf of peers (header blocks being reassembled, header lists of
// open streams, DATA not yet read by handlers, control frames queued for
// the peer, connections in their handshake), with a ledger per connection,
// pressure levels, and the shedding of the connections that hold the most
// when the account is over its limit. ARCHITECTURE.md ("The memory
// budget") gives the design and its reasons.
//
// The hot path costs a connection two atomic operations on its own ledger
// per charge: the account's shared counter moves only when a ledger crosses
// a granule (see Ledger), so that calls on many cores do not write one
// cache line.
package budget

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Level is how close an account is to its limit.
type Level uint8

const (
	// LevelNone: below the soft level; nothing is refused.
	LevelNone Level = iota
	// LevelSoft: at or above the soft level: connections holding more than
	// their fair share get new streams refused (REFUSED_STREAM), and new
	// connections are closed before their handshake.
	LevelSoft
	// LevelHard: at or above the limit: the connections holding the most
	// are shed (GOAWAY ENHANCE_YOUR_CALM) until the rest fits.
	LevelHard
)

// Shedder is what an account asks to end a connection that holds too much.
// Shed must not block for long; it runs on a goroutine of its own.
type Shedder interface {
	Shed()
}

// Account is a memory budget: the bytes charged to it by its ledgers and
// directly, against a limit. Its methods may be called from any goroutine.
type Account struct {
	limit int64
	soft  int64
	used  atomic.Int64 // bytes charged: the ledgers' reservations plus direct charges
	conns atomic.Int64 // registered ledgers
	// shedding is set while a shedding pass is queued or running, so that
	// at most one runs at a time.
	shedding atomic.Bool
	// blocks counts the header-block bytes connections buffer past their
	// guaranteed share, against blockCap (ChargeBlock).
	blocks   atomic.Int64
	blockCap atomic.Int64

	mu   sync.Mutex // guards the list of registered ledgers
	head *Ledger
}

// New returns an account of limit bytes (at least MinLimit).
func New(limit int64) *Account {
	limit = max(limit, MinLimit)
	a := &Account{limit: limit, soft: limit - limit/softFraction}
	a.blockCap.Store(limit / blockFraction)
	return a
}

// AllowBlocks raises the cap on header-block bytes past the connections'
// shares to at least n: a server configured for header lists of n bytes
// must be able to receive one (limits.go, blockFraction). The cap only
// grows, as servers may share the account.
func (a *Account) AllowBlocks(n int64) {
	for {
		c := a.blockCap.Load()
		if c >= n || a.blockCap.CompareAndSwap(c, n) {
			return
		}
	}
}

// Blocks returns the header-block bytes held past the connections' shares.
func (a *Account) Blocks() int64 { return a.blocks.Load() }

var (
	defaultOnce    sync.Once
	defaultAccount *Account
)

// Default returns the process-wide account of servers without a budget of
// their own: DefaultLimit, or a quarter of GOMEMLIMIT when that is set
// lower than four times DefaultLimit (limits.go).
func Default() *Account {
	defaultOnce.Do(func() { defaultAccount = New(defaultLimit(debug.SetMemoryLimit(-1))) })
	return defaultAccount
}

// defaultLimit is the default budget for a process whose Go memory limit is
// memLimit (math.MaxInt64: none).
func defaultLimit(memLimit int64) int64 {
	return min(DefaultLimit, memLimit/memLimitFraction)
}

// Limit returns the account's limit in bytes.
func (a *Account) Limit() int64 { return a.limit }

// Used returns the bytes charged now.
func (a *Account) Used() int64 { return a.used.Load() }

// Level returns the account's pressure now.
func (a *Account) Level() Level {
	switch u := a.used.Load(); {
	case u >= a.limit:
		return LevelHard
	case u >= a.soft:
		return LevelSoft
	}
	return LevelNone
}

// RefusesConns reports whether a new connection should be closed before
// its handshake: the account is under pressure.
func (a *Account) RefusesConns() bool { return a.used.Load() >= a.soft }

// Charge adds n bytes (negative: gives them back) to the account directly,
// for state that belongs to no ledger yet (a connection in its handshake).
func (a *Account) Charge(n int64) {
	if a.used.Add(n) >= a.limit && n > 0 {
		a.startShedding()
	}
}

// MaxHeld returns the bytes held by the registered ledger that holds the
// most, and how many ledgers are registered.
func (a *Account) MaxHeld() (most int64, conns int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for l := a.head; l != nil; l = l.next {
		most = max(most, l.held.Load())
		conns++
	}
	return most, conns
}

// startShedding runs a shedding pass on a goroutine of its own unless one
// is queued or running: the caller may hold its connection's lock, which
// shedding that connection takes.
func (a *Account) startShedding() {
	if a.shedding.CompareAndSwap(false, true) {
		go a.shed()
	}
}

// shed ends the connections holding the most, biggest first, until what
// the others hold fits the limit. Bytes of connections already being shed
// (or ended, with bytes their handlers have not freed yet) are on their way
// out and are not counted against the others: without that, one slow
// connection end would shed innocent ones.
func (a *Account) shed() {
	for {
		var victims []*Ledger
		a.mu.Lock()
		excess := a.used.Load() - a.limit
		for l := a.head; l != nil; l = l.next {
			if l.shed || l.closed.Load() {
				excess -= l.held.Load()
			}
		}
		for excess >= 0 {
			var big *Ledger
			for l := a.head; l != nil; l = l.next {
				if !l.shed && !l.closed.Load() && (big == nil || l.held.Load() > big.held.Load()) {
					big = l
				}
			}
			if big == nil || big.held.Load() == 0 {
				break
			}
			big.shed = true
			excess -= big.held.Load()
			victims = append(victims, big)
		}
		a.mu.Unlock()
		for _, l := range victims {
			go l.owner.Shed()
		}
		a.shedding.Store(false)
		// A charge that crossed the limit while the flag was still set
		// started nothing: look again, unless another pass took over.
		if len(victims) == 0 || a.used.Load() < a.limit || !a.shedding.CompareAndSwap(false, true) {
			return
		}
	}
}

// Ledger is one connection's part of an account: the bytes it holds
// exactly, and a reservation from the account in granules that covers
// them. A charge moves the reservation, and so the account, only when the
// held bytes leave the band [reserved-2 granules, reserved]: a connection
// whose calls hold less than a granule each reserves one and keeps it while
// busy, so it touches only its own ledger. Trim gives the spare back when
// the connection goes idle, Close when it ends.
//
// A nil *Ledger charges nothing: connections that answer to no account
// (clients) use one.
type Ledger struct {
	held     atomic.Int64 // bytes held, exact
	reserved atomic.Int64 // granules reserved from acct
	closed   atomic.Bool  // Close ran: no spare granule is kept any more
	acct     *Account     // set once
	owner    Shedder      // set by Register
	prev     *Ledger      // guarded by acct.mu
	next     *Ledger      // guarded by acct.mu
	shed     bool         // guarded by acct.mu: owner was asked to shed
	listed   bool         // guarded by acct.mu: in acct's list
}

// NewLedger returns a ledger charging a, not yet registered.
func (a *Account) NewLedger() *Ledger { return &Ledger{acct: a} }

// Account returns the account l charges, nil for a nil l.
func (l *Ledger) Account() *Account {
	if l == nil {
		return nil
	}
	return l.acct
}

// Register lists l with its account so that it can be shed, through s.
func (l *Ledger) Register(s Shedder) {
	if l == nil {
		return
	}
	a := l.acct
	a.mu.Lock()
	if !l.listed && !l.closed.Load() {
		l.owner = s
		l.listed = true
		l.next = a.head
		if a.head != nil {
			a.head.prev = l
		}
		a.head = l
		a.conns.Add(1)
	}
	a.mu.Unlock()
}

// unlist removes l from its account's list.
func (l *Ledger) unlist() {
	a := l.acct
	a.mu.Lock()
	if l.listed {
		l.listed = false
		if l.prev != nil {
			l.prev.next = l.next
		} else {
			a.head = l.next
		}
		if l.next != nil {
			l.next.prev = l.prev
		}
		l.prev, l.next = nil, nil
		a.conns.Add(-1)
	}
	a.mu.Unlock()
}

// Held returns the bytes l holds (0 for a nil l).
func (l *Ledger) Held() int64 {
	if l == nil {
		return 0
	}
	return l.held.Load()
}

// Charge records n more bytes held (negative: freed).
func (l *Ledger) Charge(n int64) {
	if l == nil || n == 0 {
		return
	}
	h := l.held.Add(n)
	l.reconcile()
	if h == 0 && l.closed.Load() {
		l.unlist()
	}
}

// Release records n bytes freed: Charge(-n).
func (l *Ledger) Release(n int64) { l.Charge(-n) }

// TryCharge charges n bytes unless that takes l past share while the
// account is under pressure; it reports whether it charged. Only growth
// past a connection's guaranteed share can be refused, so that pressure
// caused by others never refuses an ordinary request.
func (l *Ledger) TryCharge(n, share int64) bool {
	if l == nil {
		return true
	}
	h := l.held.Add(n)
	l.reconcile()
	if n > 0 && h > share && l.acct.used.Load() >= l.acct.soft {
		l.Charge(-n)
		return false
	}
	return true
}

// ChargeBlock charges the growth of a connection's header-block buffer from
// old to size bytes. The part past share counts against the account's cap
// on such bytes too (AllowBlocks), whatever the pressure, and growth past
// share is refused at the soft level as TryCharge refuses it; it reports
// whether it charged. ReleaseBlock gives back what it charged.
func (l *Ledger) ChargeBlock(old, size, share int64) bool {
	if l == nil {
		return true
	}
	past := max(0, size-share) - max(0, old-share)
	a := l.acct
	if past > 0 && a.blocks.Add(past) > a.blockCap.Load() {
		a.blocks.Add(-past)
		return false
	}
	if !l.TryCharge(size-old, share) {
		a.blocks.Add(-past)
		return false
	}
	return true
}

// ReleaseBlock gives back a header-block buffer of size bytes that
// ChargeBlock charged, with the cap of bytes past share it counted there.
func (l *Ledger) ReleaseBlock(size, share int64) {
	if l == nil {
		return
	}
	l.acct.blocks.Add(-max(0, size-share))
	l.Release(size)
}

// Trim gives back the spare granule a busy connection keeps; called when
// the connection goes idle.
func (l *Ledger) Trim() {
	if l == nil {
		return
	}
	l.settle(true)
}

// Close unlists l (it is shed no more) and stops keeping a spare granule,
// so that the account returns to what the remaining bytes need, and to
// nothing once the bytes still held (read later by handlers) are freed.
// Charges after Close are still counted.
func (l *Ledger) Close() {
	if l == nil {
		return
	}
	l.closed.Store(true)
	l.settle(true)
	if l.held.Load() == 0 {
		l.unlist()
	} else {
		// Kept listed, marked closed, until its bytes are freed, so
		// that a shedding pass counts them as on their way out.
		l.acct.mu.Lock()
		l.shed = true
		l.acct.mu.Unlock()
		if l.held.Load() == 0 {
			l.unlist()
		}
	}
}

// reconcile moves the reservation back into its band around held.
func (l *Ledger) reconcile() { l.settle(l.closed.Load()) }

// settle moves the reservation to cover held: up when it does not, down
// when it exceeds what held needs by more than one spare granule (by any
// amount when exact).
func (l *Ledger) settle(exact bool) {
	for {
		h := l.held.Load()
		r := l.reserved.Load()
		need := (max(h, 0) + granule - 1) / granule
		target := r
		switch {
		case r < need:
			target = need
		case exact && r > need:
			target = need
		case r > need+1:
			target = need + 1
		default:
			return
		}
		// The account moves up before the reservation and down after
		// it, so that it never shows less than the reservations: a
		// concurrent release cannot take it below zero.
		d := (target - r) * granule
		if d > 0 {
			if l.acct.used.Add(d) >= l.acct.limit {
				l.acct.startShedding()
			}
		}
		if !l.reserved.CompareAndSwap(r, target) {
			if d > 0 {
				l.acct.used.Add(-d)
			}
			continue
		}
		if d < 0 {
			l.acct.used.Add(d)
		}
	}
}

// RefusesStreams reports whether the connection of l should have new
// streams refused: the account is under pressure and l holds at least
// the mean of the registered connections, less the two granules a ledger
// may reserve beyond what it holds (so that connections holding little,
// which pressure is not about, are still served).
func (l *Ledger) RefusesStreams() bool {
	if l == nil {
		return false
	}
	a := l.acct
	u := a.used.Load()
	if u < a.soft {
		return false
	}
	h := l.held.Load()
	return h > 0 && h >= u/max(a.conns.Load(), 1)-2*granule
}

// OverLimit reports whether the account is at its limit and l holds at
// least its share (as RefusesStreams counts it): the connection should end
// rather than take more.
func (l *Ledger) OverLimit() bool {
	if l == nil || l.acct.used.Load() < l.acct.limit {
		return false
	}
	return l.RefusesStreams()
}
