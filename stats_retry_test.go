package leangrpc_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// TestStatsTransparentRetryMatchesGRPC has a scripted server refuse a
// unary call's first stream (REFUSED_STREAM: not processed) and answer
// the second, with a leangrpc and a grpc-go client: both report two
// attempts, the second with IsTransparentRetryAttempt, with the same
// events.
func TestStatsTransparentRetryMatchesGRPC(t *testing.T) {
	logs := map[bool][][]string{}
	for _, lean := range []bool{false, true} {
		logs[lean] = refusedOnceEvents(t, lean)
	}
	// The first attempt's error: the code is the same, the message each
	// implementation's own.
	norm := func(rpcs [][]string) [][]string {
		var out [][]string
		for _, l := range rpcs {
			l = withoutDelayedPick(l) // see withoutDelayedPick
			for j, line := range l {
				if rest, ok := strings.CutPrefix(line, "End client=true err=Unavailable:"); ok {
					_, tail, _ := strings.Cut(rest, " trailer=")
					l[j] = "End client=true err=Unavailable trailer=" + tail
				}
			}
			rest, reads := splitClientReads(l) // see splitClientReads
			out = append(out, append(rest, reads...))
		}
		return out
	}
	got, want := norm(logs[true]), norm(logs[false])
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("client events of a call refused once:\nleangrpc:\n  %s\ngrpc-go:\n  %s",
			strings.Join(flatten(logs[true]), "\n  "), strings.Join(flatten(logs[false]), "\n  "))
	}
	if len(got) != 2 || !slices.Contains(got[1], "Begin client=true failfast=true cs=false ss=false retry=true time=true") {
		t.Errorf("want two attempts, the second a transparent retry:\n  %s", strings.Join(flatten(logs[true]), "\n  "))
	}
}

// refusedOnceEvents makes an EmptyCall with a leangrpc or grpc-go client
// against a scripted server that refuses stream 1 and answers stream 3,
// and returns the client's recorded events once both attempts ended.
func refusedOnceEvents(t *testing.T, lean bool) [][]string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	rec := &statsRecorder{}
	var cc grpc.ClientConnInterface
	if lean {
		c, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithStatsHandler(rec))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cc = c
	} else {
		c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(rec))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cc = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{})
		errc <- err
	}()
	nc, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p := h2test.NewPeer(t, nc, h2test.ServerRole)
	p.Greet()
	p.WantHeaders(1)
	// The whole request first: refused before it, grpc-go's client may
	// find the stream gone when it sends, and then reports no OutPayload
	// and an End without error (and may fail the call with io.EOF).
	p.WantBody(1, false)
	p.WriteRST(1, h2frame.ErrCodeRefusedStream)
	p.WantHeaders(3)
	p.WantBody(3, false) // the same race, for the answer
	p.WriteHeaders(3, false, ":status", "200", "content-type", "application/grpc")
	p.WriteData(3, false, grpcFrame(0, nil))
	p.WriteHeaders(3, true, "grpc-status", "0")
	if err := <-errc; err != nil {
		t.Fatalf("lean=%v: %v", lean, err)
	}
	waitFor(t, "both attempts' End", func() bool {
		rpcs, _ := rec.snapshot()
		return len(rpcs) == 2 && ended(rpcs, 2, false)
	})
	rpcs, _ := rec.snapshot()
	return rpcs
}
