package interop_test

import (
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2test"
)

// TestH2specInteropServer runs h2spec --strict against the gRPC interop
// server (leangrpc.Server with grpc-go's TestService), which must pass every
// case: h2spec's requests are not gRPC, so this checks the server's plain
// HTTP answers and that a rejected request's stream stays open (counted
// against the stream limit, its content-length and flow control checked)
// until the client ends it. The server is given a finite stream limit
// (-max_concurrent_streams 100), which h2spec's 5.1.2 case needs.
func TestH2specInteropServer(t *testing.T) {
	if testing.Short() {
		t.Skip("h2spec takes a while; not run with -short")
	}
	srv := startServer(t, leanServer.get(t), "-max_concurrent_streams=100")
	res := h2test.RunH2spec(t, srv.port)
	for _, f := range res.Failed {
		t.Errorf("FAIL %s", f.Name)
	}
	if !res.Complete() {
		t.Errorf("h2spec --strict against the interop server: %d/%d cases pass, want %d/%d",
			res.Passed, res.Total, h2test.H2specCases, h2test.H2specCases)
	}
	select {
	case <-srv.done:
		t.Errorf("the interop server exited during the run (%v); output:\n%s", srv.cmd.ProcessState, tail(srv.out.From(0)))
	default:
	}
}
