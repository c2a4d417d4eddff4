//go:build !race

package h2frame

const raceEnabled = false
