//go:build !unix

package main

// raiseFileLimit does nothing where there is no RLIMIT_NOFILE; the
// benchmark needs Linux's /proc anyway.
func raiseFileLimit() {}
