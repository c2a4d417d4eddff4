//go:build !leangrpclockcount

package h2conn

// noteLock records an acquisition of m when built with the
// leangrpclockcount tag (mutex_count.go); otherwise it is nothing.
func noteLock(*connMutex) {}
