//go:build unix

package main

import "syscall"

// raiseFileLimit raises the soft limit on open files to the hard limit,
// for the idle connections. The Go runtime raises its own limit at start
// but gives child processes the original one back unless the program sets
// the limit itself; so it is set here even when already raised, for the
// servers started from here (tonic does not raise its own).
func raiseFileLimit() {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
}
