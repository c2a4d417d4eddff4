//go:build leangrpcdebug

package h2conn

// debugChecks turns engine assertions into panics (the leangrpcdebug tag).
const debugChecks = true
