package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary stand in for leanbench when the idle
// workload re-executes itself as the server child.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
