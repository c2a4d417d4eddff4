package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Allocations per request, a diagnostic run per server (-allocs). The Go
// servers report their heap allocation totals (runtime.MemStats) when they
// stop (-memstats), which covers the whole process: start-up, the check
// call, the warm-up and the measured window, whose requests are all
// counted. tonic's and nghttpd's allocations are calls to libc's
// allocator, counted by perf over the measured window through uprobes,
// which slow them down (the counts hold, their speed does not).

// libcAllocProbes are the perf events for libc's allocation entry points;
// Rust's default global allocator calls malloc, calloc (zeroed) and
// realloc (growth), and C++'s operator new calls malloc.
var libcAllocProbes = []string{"probe_libc:malloc", "probe_libc:calloc", "probe_libc:realloc"}

// allocCounts is what an -allocs run found.
type allocCounts struct {
	requests int64
	allocs   int64
	bytes    int64 // 0 where unknown (libc probes see calls, not sizes)
	detail   string
}

var memstatsRE = regexp.MustCompile(`memstats: mallocs (\d+) bytes (\d+)`)

// parseMemstats reads the totals a Go server logs with -memstats.
func parseMemstats(log string) (allocs, bytes int64, err error) {
	m := memstatsRE.FindStringSubmatch(log)
	if m == nil {
		return 0, 0, errors.New("the server logged no memstats line")
	}
	allocs, _ = strconv.ParseInt(m[1], 10, 64)
	bytes, _ = strconv.ParseInt(m[2], 10, 64)
	return allocs, bytes, nil
}

// parsePerfCounts reads `perf stat -x,` output: "count,unit,event,...".
func parsePerfCounts(out string) (map[string]int64, error) {
	counts := map[string]int64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || strings.HasPrefix(line, "#") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(f[0]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("perf stat: %q: %v", line, err) // "<not counted>" and the like
		}
		counts[strings.TrimSpace(f[2])] = n
	}
	if len(counts) == 0 {
		return nil, errors.New("perf stat counted nothing")
	}
	return counts, nil
}

// measureAllocs runs one server through the warm-up and the measured
// window and counts its allocations.
func measureAllocs(ctx context.Context, o options, name, bin, body string) (allocCounts, error) {
	var args []string
	if isGoServer(name) {
		args = append(args, "-memstats")
	}
	srv, err := startLoadServer(ctx, o, name, bin, args...)
	if err != nil {
		return allocCounts{}, err
	}
	c, err := measureAllocsStarted(ctx, o, srv, body)
	if serr := srv.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return c, err
	}
	if isGoServer(name) {
		c.allocs, c.bytes, err = parseMemstats(srv.log.String())
		c.detail = "runtime.MemStats over the whole process"
	}
	return c, err
}

func measureAllocsStarted(ctx context.Context, o options, srv *serverProc, body string) (allocCounts, error) {
	var c allocCounts
	if err := verifyAnswer(ctx, o, srv); err != nil {
		return c, err
	}
	c.requests = 1
	if o.warmup > 0 {
		h, err := runH2load(ctx, o, srv.addr, body, o.warmup)
		if err != nil {
			return c, fmt.Errorf("warm-up: %v", err)
		}
		c.requests += h.done
	}
	var perf *exec.Cmd
	var perfOut string
	var perfErr *strings.Builder
	if !isGoServer(srv.name) {
		f, err := os.CreateTemp("", "perf-*.csv")
		if err != nil {
			return c, err
		}
		f.Close()
		perfOut = f.Name()
		defer os.Remove(perfOut)
		perf = exec.Command("perf", "stat", "-x,", "-o", perfOut, "-e", strings.Join(libcAllocProbes, ","), "-p", strconv.Itoa(srv.pid()))
		var stderr strings.Builder
		perf.Stderr = &stderr
		if err := perf.Start(); err != nil {
			return c, fmt.Errorf("perf: %v", err)
		}
		perfErr = &stderr
		time.Sleep(time.Second) // until the probes are attached
		c.requests = 0          // only the measured window is counted
	}
	h, err := runH2load(ctx, o, srv.addr, body, o.duration)
	if perf != nil {
		_ = perf.Process.Signal(syscall.SIGINT)
		werr := perf.Wait()
		if err == nil {
			var ee *exec.ExitError
			if werr != nil && !errors.As(werr, &ee) {
				err = werr
			}
		}
	}
	if err != nil {
		return c, err
	}
	c.requests += h.done
	if perf != nil {
		b, err := os.ReadFile(perfOut)
		if err != nil {
			return c, err
		}
		counts, err := parsePerfCounts(string(b))
		if err != nil {
			return c, fmt.Errorf("%v %s; the probes are set up with: perf probe -x <libc.so.6> malloc (and calloc, realloc)",
				err, strings.TrimSpace(perfErr.String()))
		}
		var parts []string
		for _, ev := range libcAllocProbes {
			c.allocs += counts[ev]
			parts = append(parts, fmt.Sprintf("%s %.2f", strings.TrimPrefix(ev, "probe_libc:"), float64(counts[ev])/float64(c.requests)))
		}
		c.detail = "libc calls over the measured window: " + strings.Join(parts, ", ")
	}
	return c, nil
}

// isGoServer tells whether a server is the interop server program, which
// reports its own allocation totals.
func isGoServer(name string) bool { return name == serverLeangrpc || name == serverGrpcGo }

func writeAllocs(w io.Writer, name string, c allocCounts, err error) {
	if err != nil {
		fmt.Fprintf(w, "%-8s allocations FAILED: %v\n", name, err)
		return
	}
	n := float64(c.requests)
	line := fmt.Sprintf("%-8s %.1f allocations/request", name, float64(c.allocs)/n)
	if c.bytes > 0 {
		line += fmt.Sprintf(", %.0f B/request", float64(c.bytes)/n)
	}
	fmt.Fprintf(w, "%s over %d requests (%s)\n", line, c.requests, c.detail)
}
