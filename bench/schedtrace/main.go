// Command schedtrace reads a Go runtime trace (go test -trace, or
// runtime/trace) and says where goroutines waited: how much of the time
// 0, 1 or 2+ goroutines ran, how much of it a processor idled while
// goroutines were runnable (and where those had last stopped), and the
// parks by reason and stack, per operation when -ops gives their number.
// It is a separate module so that golang.org/x/exp/trace stays out of
// the library's dependencies.
//
//	go test -run XXX -bench 'UnaryParallel/lean-lean' -benchtime 1s -trace t.out .
//	go run ./bench/schedtrace -ops N t.out   (N: the benchmark's iterations)
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

func main() {
	ops := flag.Int("ops", 0, "operations the trace covers: parks are also shown per operation")
	top := flag.Int("top", 15, "rows per table")
	flag.Parse()
	if flag.NArg() != 1 {
		log.Fatal("usage: schedtrace [-ops N] TRACE")
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		log.Fatal(err)
	}
	var (
		running   = map[trace.GoID]bool{}
		runnable  = map[trace.GoID]bool{}
		lastStop  = map[trace.GoID]string{} // where each goroutine last stopped running
		byRunning = map[int]float64{}       // time with n goroutines running
		starved   float64                   // time with a processor idle and goroutines runnable
		waiting   = map[string]float64{}    // of starved: runnable goroutines by where they stopped
		parks     = map[string]int{}
		first     trace.Time
		last      trace.Time
	)
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		if first == 0 {
			first, last = ev.Time(), ev.Time()
		}
		if dt := float64(ev.Time() - last); dt > 0 {
			n := len(running)
			byRunning[min(n, 2)] += dt
			if n < 2 && len(runnable) > 0 {
				starved += dt
				for id := range runnable {
					waiting[lastStop[id]] += dt / float64(len(runnable))
				}
			}
			last = ev.Time()
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		if from == trace.GoRunning {
			lastStop[id] = where(st.Stack)
			if to == trace.GoWaiting {
				parks[st.Reason+" @ "+lastStop[id]]++
			}
		}
		delete(running, id)
		delete(runnable, id)
		switch to {
		case trace.GoRunning, trace.GoSyscall:
			running[id] = true
		case trace.GoRunnable:
			runnable[id] = true
		}
	}
	total := float64(last - first)
	if total == 0 {
		log.Fatal("empty trace")
	}
	fmt.Printf("trace: %.1f ms\n", total/1e6)
	fmt.Printf("goroutines running: none %.1f%%, one %.1f%%, two or more %.1f%% of the time\n",
		pct(byRunning[0], total), pct(byRunning[1], total), pct(byRunning[2], total))
	fmt.Printf("a processor idle while goroutines were runnable: %.1f%% of the time (assuming 2 processors); they had stopped at:\n", pct(starved, total))
	for _, kv := range sorted(waiting, *top) {
		fmt.Printf("  %5.1f%%  %s\n", pct(kv.v, total), kv.k)
	}
	fmt.Println("parks by reason and where:")
	all := 0
	for _, n := range parks {
		all += n
	}
	fp := map[string]float64{}
	for k, n := range parks {
		fp[k] = float64(n)
	}
	for _, kv := range sorted(fp, *top) {
		if *ops > 0 {
			fmt.Printf("  %8.0f  %5.2f/op  %s\n", kv.v, kv.v/float64(*ops), kv.k)
		} else {
			fmt.Printf("  %8.0f  %s\n", kv.v, kv.k)
		}
	}
	if *ops > 0 {
		fmt.Printf("all parks: %d, %.2f per op\n", all, float64(all)/float64(*ops))
		lock := 0
		for k, n := range parks {
			if strings.Contains(k, "connMutex).Lock") {
				lock += n
			}
		}
		fmt.Printf("parks on the engine lock (connMutex): %d, %.2f per op\n", lock, float64(lock)/float64(*ops))
	}
}

func pct(x, total float64) float64 { return 100 * x / total }

type kv struct {
	k string
	v float64
}

func sorted(m map[string]float64, n int) []kv {
	var s []kv
	for k, v := range m {
		s = append(s, kv{k, v})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].v > s[j].v })
	return s[:min(n, len(s))]
}

// where names a stack by its three innermost frames of the leangrpc
// module (or grpc-go's), or its innermost frame.
func where(st trace.Stack) string {
	var parts []string
	inner := ""
	for f := range st.Frames() {
		if inner == "" {
			inner = f.Func
		}
		fn := f.Func
		if strings.Contains(fn, "leangrpc") || strings.Contains(fn, "google.golang.org/grpc") {
			parts = append(parts, fn[strings.LastIndex(fn, "/")+1:])
			if len(parts) == 3 {
				break
			}
		}
	}
	if len(parts) == 0 {
		if inner == "" {
			return "?"
		}
		return inner
	}
	return strings.Join(parts, " < ")
}
