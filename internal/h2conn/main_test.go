package h2conn

import (
	"os"
	"testing"
)

// TestMain starts the process-wide lend watcher before any test takes a
// goroutine baseline: it stays once started.
func TestMain(m *testing.M) {
	StartLendWatcher()
	os.Exit(m.Run())
}
