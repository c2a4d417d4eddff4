package h2conn

import "time"

// Defaults for zero Config fields.
const (
	DefaultMaxConcurrentStreams = 1000
	DefaultInitialStreamWindow  = 1 << 20
	DefaultInitialConnWindow    = 16 << 20
	DefaultMaxHeaderListSize    = 16 << 20
	DefaultSettingsTimeout      = 10 * time.Second
	DefaultWriteBatchBytes      = 256 << 10
	// MaxExpectBytes caps how far ExpectMessage widens one stream's window.
	MaxExpectBytes = 64 << 20
)
