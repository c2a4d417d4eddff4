package h2conn

import (
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
)

// Flow control (RFC 9113 §5.2, §6.9) as pure values. Windows are int64 so
// that overflow past 2^31-1 can be detected rather than wrapped, and so that
// a send window may go negative after a SETTINGS_INITIAL_WINDOW_SIZE
// decrease (§6.9.2).

// outflow is a send window: how many bytes the peer lets us send.
type outflow struct{ n int64 }

// avail returns the bytes that may be sent now (0 when negative).
func (f *outflow) avail() int64 { return max(f.n, 0) }

// add applies a WINDOW_UPDATE increment or a settings delta; it reports
// false, leaving the window unchanged, when the result would exceed
// 2^31-1 (a FLOW_CONTROL_ERROR).
func (f *outflow) add(n int64) bool {
	if f.n+n > h2frame.MaxWindowSize {
		return false
	}
	f.n += n
	return true
}

// take records n bytes sent; n must not exceed avail.
func (f *outflow) take(n int64) { f.n -= n }

// inflow is a receive window: how many bytes the peer may still send
// (avail) and how many were consumed but not yet given back to it with
// WINDOW_UPDATE (unsent).
type inflow struct {
	avail  int64
	unsent int64
}

func (f *inflow) init(n uint32) { f.avail, f.unsent = int64(n), 0 }

// take records a received frame of n flow-controlled bytes (padding
// included); it reports false when n exceeds the window, which is a
// FLOW_CONTROL_ERROR (§6.9.1).
func (f *inflow) take(n uint32) bool {
	if int64(n) > f.avail {
		return false
	}
	f.avail -= int64(n)
	return true
}

// credit records n bytes consumed. It returns the WINDOW_UPDATE increment to
// send now, or 0: updates are batched until a quarter of window is owed, so
// that small messages do not cost one frame each, unless the peer has less
// left to send than we owe it (it is about to stall, waiting for us).
func (f *inflow) credit(n int, window uint32) uint32 {
	f.unsent += int64(n)
	if f.unsent == 0 || (f.unsent < int64(window)/4 && f.unsent < f.avail) {
		return 0
	}
	return f.flush()
}

// widen makes sure the peer may send at least n more bytes, as one
// WINDOW_UPDATE whose increment it returns (0: nothing to send). It is how a
// large message avoids stalling on quarter-window updates.
func (f *inflow) widen(n int64) uint32 {
	if f.avail+f.unsent >= n {
		if f.avail >= n {
			return 0
		}
		return f.flush()
	}
	f.unsent = n - f.avail
	return f.flush()
}

// flush announces everything owed, keeping the window within 2^31-1.
func (f *inflow) flush() uint32 {
	inc := f.unsent
	if f.avail+inc > h2frame.MaxWindowSize {
		inc = h2frame.MaxWindowSize - f.avail
	}
	if inc <= 0 {
		f.unsent = 0
		return 0
	}
	f.avail += inc
	f.unsent = 0
	return uint32(inc)
}

// bdpEstimator grows the receive windows when they, not the link, limit
// throughput. The rule is quic-go's auto-tuning: when a whole stream
// window's worth of DATA arrived within two round trips, the peer was
// window-limited, so the window doubles (up to limit). The round trip
// comes from PINGs, but unlike grpc-go there is no PING per burst of data:
// one goes out only when a window's worth arrived, and at most once per
// bdpMinInterval (or four RTTs). Small RPCs never add up to a window
// quickly, so they never ping and never grow anything.
type bdpEstimator struct {
	window      uint32        // current stream window
	limit       uint32        // never grow beyond this
	since       int64         // DATA bytes since windowStart
	windowStart time.Duration // times are since clockEpoch; 0: never
	sentAt      time.Duration
	lastAck     time.Duration
	rtt         time.Duration // smoothed; 0 until the first ACK
	pinging     bool          // a BDP PING is outstanding
}

// clockEpoch is the origin of bdpEstimator's times: durations since it
// take 8 bytes where a time.Time takes 24 and keep the monotonic clock.
var clockEpoch = time.Now().Add(-time.Second)

// bdpMinInterval bounds the PING rate on fast links.
const bdpMinInterval = 50 * time.Millisecond

// onData records n received DATA bytes. clock is called at most once per
// window's worth of data. It reports whether to send a BDP PING now and
// the new stream window when it grew (else 0).
func (b *bdpEstimator) onData(n uint32, clock func() time.Time) (ping bool, grown uint32) {
	if b.window >= b.limit {
		return false, 0
	}
	b.since += int64(n)
	if b.since < int64(b.window) {
		return false, 0
	}
	now := clock().Sub(clockEpoch)
	elapsed := now - b.windowStart
	measured := b.windowStart != 0
	b.since, b.windowStart = 0, now
	if measured && b.rtt > 0 && elapsed < 2*b.rtt {
		b.window = uint32(min(2*int64(b.window), int64(b.limit)))
		grown = b.window
	}
	if !b.pinging && (b.lastAck == 0 || now-b.lastAck >= max(bdpMinInterval, 4*b.rtt)) {
		b.pinging, b.sentAt = true, now
		ping = true
	}
	return ping, grown
}

// onAck records the ACK of the BDP PING: one round-trip sample.
func (b *bdpEstimator) onAck(t time.Time) {
	if b == nil || !b.pinging { // nil: no estimator yet, so no BDP PING out
		return
	}
	now := t.Sub(clockEpoch)
	b.pinging = false
	b.lastAck = now
	rtt := max(now-b.sentAt, time.Microsecond)
	if b.rtt == 0 {
		b.rtt = rtt
	} else {
		b.rtt = (7*b.rtt + rtt) / 8
	}
}
