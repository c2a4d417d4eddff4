//go:build race

package hpack

// raceEnabled: sync.Pool drops items at random under the race detector, so
// tests asserting that pooled scratch comes back without allocating skip.
const raceEnabled = true
