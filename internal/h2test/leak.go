package h2test

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// LeakWait bounds how long the leak checks wait for goroutines and buffers
// to come back to their baseline. Inside a synctest bubble it is fake time.
const LeakWait = 5 * time.Second

// CheckGoroutines records the goroutines running now and, when the test
// ends, waits up to LeakWait for every goroutine started since to exit; it
// fails the test with the stacks of those still running. Call it first in
// the test, so that its cleanup runs after the test's own (cleanups run in
// reverse order). Tests using it must not run in parallel with others in the
// same binary.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	base := map[string]bool{}
	for _, g := range goroutines() {
		base[g.id] = true
	}
	t.Cleanup(func() {
		var extra []goroutine
		deadline := time.Now().Add(LeakWait)
		for {
			extra = extra[:0]
			for _, g := range goroutines() {
				if !base[g.id] && !benign(g.stack) {
					extra = append(extra, g)
				}
			}
			if len(extra) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(extra) == 0 {
			return
		}
		var sb strings.Builder
		for _, g := range extra {
			sb.WriteString(g.stack)
			sb.WriteString("\n\n")
		}
		t.Errorf("h2test: %d goroutine(s) leaked (still running %v after the test):\n\n%s", len(extra), LeakWait, sb.String())
	})
}

type goroutine struct{ id, stack string }

// goroutines returns every goroutine but the caller's.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for i, s := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 {
			continue // the caller
		}
		st := string(bytes.TrimSpace(s))
		id, _, _ := strings.Cut(strings.TrimPrefix(st, "goroutine "), " ")
		if _, err := strconv.Atoi(id); err != nil {
			continue
		}
		gs = append(gs, goroutine{id, st})
	}
	return gs
}

// benign reports goroutines the runtime or the testing package start on
// their own.
func benign(stack string) bool {
	for _, s := range []string{
		"testing.(*T).Run(",
		"testing.runTests(",
		"testing.(*M).",
		"os/signal.signal_recv",
		"runtime.ensureSigM",
		"runtime/trace.",
		"created by runtime.gc",
		"runtime.goexit0",
	} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// CheckPool records pool's outstanding buffer count now and, when the test
// ends, waits up to LeakWait for it to come back; it fails the test with the
// difference otherwise. Call it before starting what uses the pool, so that
// its cleanup runs after the cleanups closing them. Give each test a pool of
// its own (bufpool.New(nil)) so that other tests cannot disturb the count.
func CheckPool(t testing.TB, pool *bufpool.Pool) {
	t.Helper()
	base := pool.Outstanding()
	t.Cleanup(func() {
		deadline := time.Now().Add(LeakWait)
		for {
			n := pool.Outstanding()
			if n == base {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("h2test: pool has %d buffer(s) outstanding, %d at the start of the test: %d leaked", n, base, n-base)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// Background wraps t for a peer or helper running on a goroutine other than
// the test's: Fatalf and FailNow report the failure with Errorf and end only
// that goroutine (runtime.Goexit), as testing forbids FailNow off the test
// goroutine.
func Background(t testing.TB) testing.TB { return bgTB{t} }

type bgTB struct{ testing.TB }

func (b bgTB) Fatalf(format string, args ...any) {
	b.TB.Helper()
	b.TB.Errorf(format, args...)
	runtime.Goexit()
}

func (b bgTB) Fatal(args ...any) {
	b.TB.Helper()
	b.TB.Error(args...)
	runtime.Goexit()
}

func (b bgTB) FailNow() {
	b.TB.Fail()
	runtime.Goexit()
}
