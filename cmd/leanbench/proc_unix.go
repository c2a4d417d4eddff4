//go:build unix

package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processCPU returns the user plus system CPU time of the whole process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// residentBytes returns the resident set size of the process, from
// /proc/self/statm (Linux); 0 where that file does not exist.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// fileLimits returns the soft and hard RLIMIT_NOFILE: children inherit the
// hard one, and each idle child raises its soft limit to it.
func fileLimits() (cur, max uint64, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, err
	}
	return uint64(rl.Cur), uint64(rl.Max), nil
}

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit and
// returns the resulting soft and hard limits. The Go runtime raises the
// soft limit at start already (since Go 1.19), but where the hard limit
// is unlimited (macOS) that raise stops lower and so may this one: the
// caller compares the soft limit it gets with what it needs.
func raiseFileLimit() (cur, max uint64, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, err
	}
	if rl.Cur < rl.Max {
		want := rl
		want.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			rl = want
		}
	}
	return uint64(rl.Cur), uint64(rl.Max), nil
}
