//go:build race

package bufpool

// raceEnabled: sync.Pool drops items at random under the race detector, so
// allocation counts are not asserted.
const raceEnabled = true
