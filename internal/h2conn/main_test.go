package h2conn

import (
	"os"
	"testing"

	"github.com/leangrpc/leangrpc/internal/sockio"
)

// TestMain starts the process-wide goroutines, the role watcher and the
// idle poller (where there is one), before any test takes a goroutine
// baseline: they stay once started.
func TestMain(m *testing.M) {
	StartRoleWatcher()
	sockio.StartIdlePoller() // errors.ErrUnsupported on the portable path
	os.Exit(m.Run())
}
