package h2conn

import "time"

// inSynctestBubble reports whether the calling goroutine runs inside a
// testing/synctest bubble. A connection made there (Config.inBubble) keeps
// out of what the process shares between connections, since a bubble's
// timers, goroutines and channels must belong to it: its keepalive timer
// is a time.Timer of its own rather than an entry of the shared heap
// (sharedtimer.go), its released streams (whose channels were made in the
// bubble) stay out of the process-wide spare pool, and its reader never
// offers its read role, which the process-wide watcher would look after (reader.go).
//
// A bubble's clock is fake, and time.Now there carries no monotonic
// reading (the runtime omits it so that times from inside and outside a
// bubble are not mixed), while outside one it always does on every
// platform Go supports (until the year 2157, when the wall clock no longer
// fits beside it).
func inSynctestBubble() bool {
	now := time.Now()
	return now == now.Round(0)
}

// timerExpired runs the keepalive check when the connection's sharedTimer
// expires, on a goroutine of its own: the heap's runtime timer serves
// every connection and must not wait for one.
func (c *Conn) timerExpired() { go c.onKeepalive() }
