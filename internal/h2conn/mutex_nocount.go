//go:build !leangrpclockcount

package h2conn

// noteLock records an acquisition of m, and noteHeld and noteUnlock the
// time it was held, when built with the leangrpclockcount tag
// (mutex_count.go); otherwise they are nothing.
func noteLock(*connMutex)   {}
func noteHeld(*connMutex)   {}
func noteUnlock(*connMutex) {}
