//go:build !race

package sockio

// raceReleaseIO is needed only by the race detector; see race_on_linux.go.
func raceReleaseIO() {}
