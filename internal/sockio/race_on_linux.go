//go:build race && !leangrpcportable

package sockio

import "syscall"

// raceReleaseIO records, for the race detector, that memory written so far
// happens before bytes written to a socket now. syscall.Write does this
// before its system call and syscall.Read pairs with it after reading; a raw
// writev has no such annotation, so a zero-length write to an invalid
// descriptor supplies it (in race builds only).
func raceReleaseIO() { syscall.Write(-1, nil) }

// raceBuild makes reads go through syscall.Read, whose annotation pairs
// with raceReleaseIO's.
const raceBuild = true
