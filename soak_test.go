package leangrpc_test

import (
	"context"
	"encoding/binary"
	"math/bits"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// TestSoakBudget runs legitimate unary calls against a server with a
// memory budget, first alone, then under attacks that rotate every two
// seconds (unread DATA, CONTINUATION, SETTINGS without reading, rapid
// reset, each from 8 connections at once; the unread DATA is over the
// budget, the CONTINUATION over its soft level), for LEANGRPC_SOAK (a Go
// duration; the test is skipped without it, so CI does not run it). It
// logs the p99 latency of the legitimate calls alone and under attack and
// the process's RSS along the way (PERFORMANCE.md, "the memory budget"),
// and asserts what is not speed: every legitimate call succeeds, RSS does
// not keep growing after the first rotation of attacks, and the budget's
// account returns to zero at the end.
func TestSoakBudget(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("LEANGRPC_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("LEANGRPC_SOAK=<duration> runs the soak")
	}
	const budget = 32 << 20
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer(leangrpc.MemoryBudget(budget))
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(lis)
	defer s.Stop()
	addr := lis.Addr().String()

	// Legitimate load: 4 callers on each of 2 connections made first.
	var clients []testgrpc.TestServiceClient
	for range 2 {
		cc, err := leangrpc.NewClient(addr, leangrpc.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		clients = append(clients, testgrpc.NewTestServiceClient(cc))
	}
	var phase atomic.Int32 // 0: warm-up, 1: alone, 2: under attack
	var lat [3]latencyHistogram
	var failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	req := &testpb.SimpleRequest{ResponseSize: 100, Payload: payload(100)}
	for i := range 8 {
		c := clients[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ph := phase.Load()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				_, err := c.UnaryCall(ctx, req)
				el := time.Since(start)
				cancel()
				if err != nil {
					failed.Add(1)
					t.Errorf("legitimate call failed: %v", err)
					continue
				}
				if ph == phase.Load() {
					lat[ph].add(el)
				}
				time.Sleep(time.Millisecond) // a steady load, not a saturating one
			}
		}()
	}

	time.Sleep(time.Second)
	alone := max(d/5, 5*time.Second)
	phase.Store(1)
	time.Sleep(alone)
	phase.Store(2)
	var rss []int64
	attacks := []func() []byte{soakUnreadData, soakContinuation, soakSettings, func() []byte { return rapidResets(5000) }}
	names := []string{"unread DATA", "CONTINUATION", "SETTINGS without reading", "rapid reset"}
	var peak int64
	end := time.Now().Add(d - alone)
	for round := 0; time.Now().Before(end); round++ {
		k := round % len(attacks)
		b := attacks[k]()
		var aw sync.WaitGroup
		for range 8 {
			aw.Add(1)
			go func() {
				defer aw.Done()
				soakAttackConn(addr, b, 2*time.Second)
			}()
		}
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
			peak = max(peak, leangrpc.MemoryInUse(s))
			time.Sleep(10 * time.Millisecond)
		}
		aw.Wait()
		if k == len(attacks)-1 {
			debug.FreeOSMemory() // what is freed leaves the RSS now, not at the scavenger's pace
			rss = append(rss, soakRSS())
			t.Logf("after round %d (%s last): RSS %d MiB, account peak %d MiB", round, names[k], rss[len(rss)-1]>>20, peak>>20)
		}
	}
	close(stop)
	wg.Wait()
	a, u := lat[1].quantile(0.99), lat[2].quantile(0.99)
	t.Logf("legitimate calls: %d alone, p99 %v; %d under attack, p99 %v (%.1fx); %d failed", lat[1].count(), a, lat[2].count(), u, float64(u)/float64(max(a, 1)), failed.Load())
	if len(rss) >= 3 {
		// Flat: the last sample within a quarter of the first (after one
		// whole rotation, once pools and the heap reached their size).
		if first, last := rss[0], rss[len(rss)-1]; last > first+first/4 {
			t.Errorf("RSS grew from %d MiB to %d MiB under rotating attacks", first>>20, last>>20)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for leangrpc.MemoryInUse(s) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Only the two legitimate connections remain; each may keep one spare
	// granule of its ledger while busy.
	if used := leangrpc.MemoryInUse(s); used > 64<<10 {
		t.Errorf("the account holds %d KiB after the attacks", used>>10)
	}
}

// latencyHistogram counts durations in log-linear buckets (16 per power of
// two, so a quantile is within 1/16 of the true value) without growing
// with the number of calls, so that a long soak's own bookkeeping does not
// show in its RSS.
type latencyHistogram struct {
	n [64 * 16]atomic.Int64
}

func latencyBucket(d time.Duration) int {
	ns := uint64(max(d, 1))
	e := bits.Len64(ns) - 1 // ns is in [2^e, 2^(e+1))
	var m uint64
	if e >= 4 {
		m = (ns >> (e - 4)) & 15
	} else {
		m = (ns << (4 - e)) & 15
	}
	return e*16 + int(m)
}

func (h *latencyHistogram) add(d time.Duration) { h.n[latencyBucket(d)].Add(1) }

func (h *latencyHistogram) count() int64 {
	var n int64
	for i := range h.n {
		n += h.n[i].Load()
	}
	return n
}

// quantile returns the upper edge of the bucket holding quantile q.
func (h *latencyHistogram) quantile(q float64) time.Duration {
	want := int64(q * float64(h.count()))
	var n int64
	for i := range h.n {
		if n += h.n[i].Load(); n > want {
			e, m := i/16, i%16
			return time.Duration((uint64(16+m+1) << e) >> 4)
		}
	}
	return 0
}

// soakAttackConn dials addr, writes the client preface, an empty SETTINGS
// and b without reading anything, for at most d, and closes.
func soakAttackConn(addr string, b []byte, d time.Duration) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(d))
	hello := append([]byte(h2frame.ClientPreface()), h2test.AppendFrame(nil, h2frame.TypeSettings, 0, 0, nil)...)
	if _, err := c.Write(hello); err != nil {
		return
	}
	c.Write(b)
	// Hold what was sent until the rotation ends.
	c.SetReadDeadline(time.Now().Add(d))
	var buf [1]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // read almost nothing
	}
}

// soakUnreadData: 8 unary requests announcing 3 MiB and sending 768 KiB
// each (8 connections: 48 MiB, over the soak's budget).
func soakUnreadData() []byte {
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], 3<<20)
	chunk := make([]byte, 16<<10)
	var b []byte
	for i := range 8 {
		id := uint32(1 + 2*i)
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders, id, requestBlock(unaryPath))
		b = h2test.AppendFrame(b, h2frame.TypeData, 0, id, prefix)
		for range 48 {
			b = h2test.AppendFrame(b, h2frame.TypeData, 0, id, chunk)
		}
	}
	return b
}

// soakContinuation: a header block that never ends, 6 MiB of it.
func soakContinuation() []byte {
	b := h2test.AppendFrame(nil, h2frame.TypeHeaders, 0, 1, []byte{0x00, 0x7f, 0xff, 0xff, 0xff, 0x07})
	frag := []byte(strings.Repeat("a", 16<<10))
	for len(b) < 6<<20 {
		b = h2test.AppendFrame(b, h2frame.TypeContinuation, 0, 1, frag)
	}
	return b
}

// soakSettings: SETTINGS frames, each owing an ACK.
func soakSettings() []byte {
	settings := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, uint16(h2frame.SettingInitialWindowSize)), 1<<16)
	var b []byte
	for range 300_000 {
		b = h2test.AppendFrame(b, h2frame.TypeSettings, 0, 0, settings)
	}
	return b
}

// soakRSS returns the process's resident set (Linux), or the memory Go
// obtained from the system elsewhere.
func soakRSS() int64 {
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return pages * int64(os.Getpagesize())
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.Sys)
}
