package leangrpc

import (
	"os"
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2conn"
)

// TestMain starts h2conn's process-wide lend watcher before any test takes
// a goroutine baseline: it stays once started.
func TestMain(m *testing.M) {
	h2conn.StartLendWatcher()
	os.Exit(m.Run())
}
