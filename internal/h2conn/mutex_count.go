//go:build leangrpclockcount

package h2conn

import (
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// With the leangrpclockcount tag, every acquisition of a Conn.mu is
// counted by where it came from, so that a test can tell how many times a
// call takes the engine lock and at which step (lockcount_test.go in the
// root package). Production builds never carry this tag.

// LockSite is where an acquisition came from: the connection's role, the
// outermost h2conn function of the acquiring goroutine's stack (the step
// of the call, such as (*Stream).Send, or the reader's loop), and the
// function of the layer above that called it (runtime.goexit on the
// engine's own goroutines), and the function that took the lock.
type LockSite struct {
	Server bool
	Entry  string
	Caller string
	Taker  string
}

var lockCounts struct {
	sync.Mutex
	m map[LockSite]int
	// since is when each held lock was taken; held sums the time held,
	// by role (client, server).
	since map[*connMutex]time.Time
	held  [2]time.Duration
}

func noteLock(m *connMutex) {
	c := (*Conn)(unsafe.Pointer(uintptr(unsafe.Pointer(m)) - unsafe.Offsetof(Conn{}.mu)))
	var pcs [48]uintptr
	n := runtime.Callers(3, pcs[:]) // above noteLock and connMutex.Lock
	frames := runtime.CallersFrames(pcs[:n])
	site := LockSite{Server: c.role == RoleServer}
	const pkg = "leangrpc/internal/h2conn."
	for {
		f, more := frames.Next()
		name := f.Function
		if i := strings.Index(name, pkg); i >= 0 {
			site.Entry = name[i+len(pkg):]
			if site.Taker == "" {
				site.Taker = site.Entry
			}
		} else {
			if j := strings.LastIndex(name, "/"); j >= 0 {
				name = name[j+1:]
			}
			site.Caller = name
			break
		}
		if !more {
			break
		}
	}
	lockCounts.Lock()
	if lockCounts.m == nil {
		lockCounts.m = make(map[LockSite]int)
	}
	lockCounts.m[site]++
	lockCounts.Unlock()
}

// noteHeld records that m was just taken.
func noteHeld(m *connMutex) {
	now := time.Now()
	lockCounts.Lock()
	if lockCounts.since == nil {
		lockCounts.since = make(map[*connMutex]time.Time)
	}
	lockCounts.since[m] = now
	lockCounts.Unlock()
}

// noteUnlock adds the time m was held to its role's sum.
func noteUnlock(m *connMutex) {
	now := time.Now()
	c := (*Conn)(unsafe.Pointer(uintptr(unsafe.Pointer(m)) - unsafe.Offsetof(Conn{}.mu)))
	side := 0
	if c.role == RoleServer {
		side = 1
	}
	lockCounts.Lock()
	if t, ok := lockCounts.since[m]; ok {
		lockCounts.held[side] += now.Sub(t)
		delete(lockCounts.since, m)
	}
	lockCounts.Unlock()
}

// TakeLockHeld returns the time the engine locks of clients and of servers
// were held since the last call, and starts summing afresh.
func TakeLockHeld() (client, server time.Duration) {
	lockCounts.Lock()
	defer lockCounts.Unlock()
	client, server = lockCounts.held[0], lockCounts.held[1]
	lockCounts.held = [2]time.Duration{}
	return client, server
}

// TakeLockCounts returns the acquisitions counted since the last call and
// starts counting afresh.
func TakeLockCounts() map[LockSite]int {
	lockCounts.Lock()
	defer lockCounts.Unlock()
	m := lockCounts.m
	lockCounts.m = nil
	return m
}
