package leangrpc_test

import (
	"context"
	"testing"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// A unary call between a leangrpc client and server allocates little, both
// sides and the codec counted: the client's stream object goes back to the
// connection after Invoke (grpcwire.ClientStream.Release) and both ends
// reuse released streams.
func TestUnaryCallAllocations(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	e := setup(t, pairs[0], serverSettings{}, clientSettings{})
	defer e.stop()
	ctx := context.Background()
	req := &testpb.SimpleRequest{}
	for range 50 { // warm up pools and free lists
		if _, err := e.tc.UnaryCall(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(300, func() {
		if _, err := e.tc.UnaryCall(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.1f allocations per unary call", allocs)
	if allocs > maxUnaryAllocs {
		t.Errorf("%.1f allocations per unary call, want at most %d", allocs, maxUnaryAllocs)
	}
}

const maxUnaryAllocs = 26
