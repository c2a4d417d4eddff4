package leangrpc

import "time"

// The server's own limits against hostile peers; those of the engine,
// the frame layer, HPACK and the memory budget are in the limits.go of
// their packages.

// The repeat-offender throttle (offenders.go).
const (
	// offenderBaseInterval is the gap between served connections after a
	// first offense; it doubles with each offense up to the option's
	// maximum (defaultOffenderMaxInterval), so that a one-off costs a
	// client next to nothing and a flood is throttled within a dozen
	// offenses.
	offenderBaseInterval = time.Millisecond
	// defaultOffenderMaxInterval: a persistent attacker gets one
	// connection a second, whose allowance costs the server well under a
	// hundredth of a core.
	defaultOffenderMaxInterval = time.Second
	// offenderMemory is how long an address stays in the table after its
	// last offense.
	offenderMemory = 30 * time.Second
	// maxOffenders bounds the table (about 100 bytes an entry). When it is
	// full of live entries a new offender replaces an arbitrary one: an
	// attacker with more addresses than this is throttled less, never
	// given memory.
	maxOffenders = 4096
)
