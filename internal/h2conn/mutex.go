package h2conn

import (
	"runtime"
	"sync/atomic"
)

// connMutex is the engine's mutex (Conn.mu): sync.Mutex without its
// starvation mode.
//
// Every stream operation of a connection takes Conn.mu, so with a hundred
// calls in flight a hundred goroutines contend for it, and with that many
// runnable goroutines a woken waiter easily spends a millisecond in the
// run queue. sync.Mutex then switches to starvation mode, in which Unlock
// hands the lock to the oldest waiter, which must first be scheduled: every
// hand-over costs a goroutine switch, and the mode lasts as long as waiters
// keep waiting that long. This mutex lets a newcomer take a free lock
// ahead of woken waiters (sync.Mutex's normal mode, always) and spins
// briefly before sleeping. (Runs that are slow for both stacks at once
// come from the machine, not from a convoy on this mutex: its share of the
// CPU stays the same; PERFORMANCE.md, "The engine lock".)
//
// Lock and Unlock follow the classic three-state futex mutex, with a
// one-slot channel as the futex: state is 0 (free), 1 (held) or 2 (held,
// and someone may be waiting). A waiter marks 2 and sleeps on wake; an
// Unlock that finds 2 leaves a token there. The channel is made at the
// first contention (by the first waiter, or an Unlock that finds 2), so a
// connection without contention — an idle one — does not pay for it.
type connMutex struct {
	state atomic.Int32
	wake  atomic.Pointer[chan struct{}]
}

// Lock locks m.
func (m *connMutex) Lock() {
	noteLock(m)
	if m.state.CompareAndSwap(0, 1) {
		noteHeld(m)
		return
	}
	if spinOK {
		// Critical sections are short: a lock about to be freed is
		// cheaper to wait for here than through a park and a wake-up.
		for range spinTries {
			if m.state.Load() == 0 && m.state.CompareAndSwap(0, 1) {
				noteHeld(m)
				return
			}
		}
	}
	for m.state.Swap(2) != 0 {
		<-m.wakeCh()
	}
	noteHeld(m)
}

// spinTries bounds the loads Lock spends on a held mutex before sleeping
// (a few hundred nanoseconds); spinOK is false on one CPU, where the
// holder cannot run while we spin.
const spinTries = 200

var spinOK = runtime.NumCPU() > 1

// TryLock locks m if it is free and reports whether it did.
func (m *connMutex) TryLock() bool {
	if m.state.CompareAndSwap(0, 1) {
		noteLock(m)
		noteHeld(m)
		return true
	}
	return false
}

// Unlock unlocks m. As with sync.Mutex, any goroutine may unlock it.
func (m *connMutex) Unlock() {
	noteUnlock(m)
	switch m.state.Swap(0) {
	case 2:
		// Wake one waiter (a token already there wakes one just as
		// well); it takes the lock marking 2, so its Unlock wakes the
		// next.
		select {
		case m.wakeCh() <- struct{}{}:
		default:
		}
	case 0:
		panic("h2conn: unlock of unlocked connMutex")
	}
}

// wakeCh returns the channel waiters sleep on, making it at first use.
func (m *connMutex) wakeCh() chan struct{} {
	if p := m.wake.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{}, 1)
	if m.wake.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *m.wake.Load()
}
