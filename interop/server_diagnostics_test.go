package interop_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"syscall"
	"testing"
	"time"
)

var memstatsRE = regexp.MustCompile(`memstats: mallocs [1-9]\d* bytes [1-9]\d* gc \d+`)

// TestServerDiagnostics checks the server's -cpuprofile and -memstats
// flags, which the server benchmark (bench/servers) uses: after a call and
// a SIGTERM the server exits cleanly, leaves a profile (gzip-compressed, as
// runtime/pprof writes them) and logs its allocation totals.
func TestServerDiagnostics(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("stops the server with SIGTERM")
	}
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	srv := startServer(t, leanServer.get(t), "-cpuprofile="+prof, "-memstats")
	if out, err := runClient(leanClient.get(t), srv.port, "large_unary", plaintext.clientArgs...); err != nil {
		t.Fatalf("large_unary: %v\n%s", err, tail(out))
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("server still running 15s after SIGTERM; output:\n%s", tail(srv.out.From(0)))
	}
	if !srv.cmd.ProcessState.Success() {
		t.Fatalf("server exited with %v; output:\n%s", srv.cmd.ProcessState, tail(srv.out.From(0)))
	}
	if log := srv.out.From(0); !memstatsRE.Match(log) {
		t.Errorf("no allocation totals logged; output:\n%s", tail(log))
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("profile of %d bytes does not start as gzip: % x", len(b), b[:min(len(b), 8)])
	}
}
