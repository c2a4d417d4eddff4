//go:build !unix

package main

import (
	"errors"
	"time"
)

func processCPU() time.Duration { return 0 }

func residentBytes() int64 { return 0 }

func fileLimits() (cur, max uint64, err error) {
	return 0, 0, errors.New("file limit not available on this OS")
}

func raiseFileLimit() (cur, max uint64, err error) {
	return 0, 0, errors.New("file limit not available on this OS")
}
