package leangrpc_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/leangrpc/leangrpc"
)

// TestDialBlock: a blocking Dial returns a READY ClientConn that serves
// calls.
func TestDialBlock(t *testing.T) {
	addr, stop := startServer(t, true, serverSettings{})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := leangrpc.DialContext(ctx, addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if s := cc.GetState(); s != connectivity.Ready {
		t.Fatalf("state after a blocking Dial: %v, want READY", s)
	}
	if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestDialConnectsAtOnce: Dial without WithBlock returns at once, and the
// ClientConn starts connecting without waiting for a call, as grpc-go's
// Dial does (NewClient stays IDLE).
func TestDialConnectsAtOnce(t *testing.T) {
	addr, stop := startServer(t, true, serverSettings{})
	defer stop()
	cc, err := leangrpc.Dial(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("no READY without a call: still %v", s)
		}
	}
	lazy, err := leangrpc.NewClient(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	if s := lazy.GetState(); s != connectivity.Idle {
		t.Errorf("NewClient's ClientConn is %v before any call, want IDLE", s)
	}
}

// TestDialPassthrough: Dial hands a target without a scheme to the dialer
// as written (grpc-go's Dial reads it with "passthrough"), where NewClient
// would resolve it with DNS.
func TestDialPassthrough(t *testing.T) {
	addr, stop := startServer(t, true, serverSettings{})
	defer stop()
	var mu sync.Mutex
	var got []string
	dialer := func(ctx context.Context, a string) (net.Conn, error) {
		mu.Lock()
		got = append(got, a)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	const target = "no-such-host.invalid:4242"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := leangrpc.DialContext(ctx, target, leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithContextDialer(dialer), leangrpc.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || got[0] != target {
		t.Errorf("the dialer got %q, want %q", got, target)
	}
}

// TestDialBlockTimeout: a blocking Dial to an address that refuses
// connections ends with its context (or WithTimeout), closing what it
// made; WithReturnConnectionError adds the last connection error, and
// FailOnNonTempDialError ends it at the first refusal. Each error reads as
// grpc-go's does for the same dial.
func TestDialBlockTimeout(t *testing.T) {
	addr := deadAddr(t)
	creds := insecure.NewCredentials()
	for _, tc := range []struct {
		name       string
		lean       []leangrpc.DialOption
		grpc       []grpc.DialOption
		wantCtxErr bool // the error is the context's
		wantRefuse bool // the error names the refusal
		fast       bool // it does not wait for the timeout
	}{
		{"WithTimeout",
			[]leangrpc.DialOption{leangrpc.WithBlock(), leangrpc.WithTimeout(300 * time.Millisecond)},
			[]grpc.DialOption{grpc.WithBlock(), grpc.WithTimeout(300 * time.Millisecond)},
			true, false, false},
		{"WithReturnConnectionError",
			[]leangrpc.DialOption{leangrpc.WithReturnConnectionError(), leangrpc.WithTimeout(300 * time.Millisecond)},
			[]grpc.DialOption{grpc.WithReturnConnectionError(), grpc.WithTimeout(300 * time.Millisecond)},
			false, true, false},
		{"FailOnNonTempDialError",
			[]leangrpc.DialOption{leangrpc.WithBlock(), leangrpc.FailOnNonTempDialError(true), leangrpc.WithTimeout(10 * time.Second)},
			[]grpc.DialOption{grpc.WithBlock(), grpc.FailOnNonTempDialError(true), grpc.WithTimeout(10 * time.Second)},
			false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			cc, err := leangrpc.Dial(addr, append([]leangrpc.DialOption{leangrpc.WithTransportCredentials(creds)}, tc.lean...)...)
			took := time.Since(start)
			if err == nil {
				cc.Close()
				t.Fatal("Dial to a refusing address succeeded")
			}
			if got := errors.Is(err, context.DeadlineExceeded) && err == context.DeadlineExceeded; got != tc.wantCtxErr {
				t.Errorf("error %q: is the context's: %v, want %v", err, got, tc.wantCtxErr)
			}
			if got := strings.Contains(err.Error(), "connection refused"); got != tc.wantRefuse {
				t.Errorf("error %q: names the refusal: %v, want %v", err, got, tc.wantRefuse)
			}
			if tc.fast && took > 5*time.Second {
				t.Errorf("took %v: did not fail at the first refusal", took)
			}
			gcc, gerr := grpc.Dial(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, tc.grpc...)...)
			if gerr == nil {
				gcc.Close()
				t.Fatal("grpc-go's Dial to a refusing address succeeded")
			}
			if err.Error() != gerr.Error() {
				t.Errorf("error %q, grpc-go's %q", err, gerr)
			}
		})
	}
}

// TestDialCanceled: a blocking Dial ends when its context is canceled.
func TestDialCanceled(t *testing.T) {
	addr := deadAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	cc, err := leangrpc.DialContext(ctx, addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithBlock())
	if err == nil {
		cc.Close()
		t.Fatal("Dial succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}
