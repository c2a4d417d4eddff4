//go:build !race && !leangrpcportable

package sockio

// raceReleaseIO is needed only by the race detector; see race_on_linux.go.
func raceReleaseIO() {}

// raceBuild is false outside race builds; see race_on_linux.go.
const raceBuild = false
