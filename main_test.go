package leangrpc

import (
	"os"
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/sockio"
)

// TestMain starts the process-wide goroutines, h2conn's role watcher and
// sockio's idle poller (where there is one), before any test takes a
// goroutine baseline: they stay once started.
func TestMain(m *testing.M) {
	h2conn.StartRoleWatcher()
	sockio.StartIdlePoller() // errors.ErrUnsupported on the portable path
	os.Exit(m.Run())
}
