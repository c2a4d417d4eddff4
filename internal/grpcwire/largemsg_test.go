package grpcwire

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// viewCodec hands the transport a message's bytes as they are and checks a
// received message's length and edge bytes without keeping or copying it,
// so that what a test measures is the transport's own allocation, not a
// codec's.
type viewCodec struct{}

// viewMsg is what viewCodec marshals and checks against: n bytes, the first
// and last of which are first and last.
type viewMsg struct {
	b    []byte
	n    int
	edge [2]byte
}

func (viewCodec) Name() string { return "view" }

func (viewCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*viewMsg).b)}, nil
}

func (viewCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m := v.(*viewMsg)
	m.n = data.Len()
	if len(data) == 0 || m.n == 0 {
		return nil
	}
	first, last := data[0].ReadOnlyData(), data[len(data)-1].ReadOnlyData()
	m.edge = [2]byte{first[0], last[len(last)-1]}
	return nil
}

// TestLargeMessagesAllocateOnce echoes 16 MB messages over loopback TCP
// between two engines: once the stream is warm, a message's send buffer
// and the buffer it is gathered in on receipt come from the pool, so the
// bytes the process allocates per message stay well below the message's
// size (without pooling above 4 MiB they were twice it and more: a send
// buffer and a receive buffer each time). The BDP-off case keeps the
// stream window small, so the receive buffer grows in steps, each from the
// pool too.
func TestLargeMessagesAllocateOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("moves a few hundred MB over loopback")
	}
	for _, disableBDP := range []bool{false, true} {
		t.Run(fmt.Sprintf("disableBDP=%v", disableBDP), func(t *testing.T) {
			testLargeMessagesAllocate(t, h2conn.Config{PooledReads: true, DisableBDP: disableBDP})
		})
	}
}

func testLargeMessagesAllocate(t *testing.T, cfg h2conn.Config) {
	const size = 16_000_000
	const limit = 64 << 20
	pool := bufpool.New(nil)
	cfg.Pool = pool
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvDone := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			srvDone <- err
			return
		}
		srv := h2conn.NewServerConn(nc, cfg, h2conn.HandlerFunc(func(st *h2conn.Stream) {
			req, _ := ParseRequest(st.Headers())
			ss := NewServerStream(context.Background(), st, req, &ServerConfig{Pool: pool, MaxRecv: limit, Codec: viewCodec{}})
			go func() {
				defer st.Release()
				out := &viewMsg{b: make([]byte, size)}
				out.b[0], out.b[size-1] = 's', 'S'
				for {
					var in viewMsg
					err := ss.RecvMsg(&in)
					if err == io.EOF {
						ss.Finish(status.New(0, ""))
						return
					}
					if err != nil {
						t.Errorf("server RecvMsg: %v", err)
						ss.Finish(status.Convert(err))
						return
					}
					if in.n != size || in.edge != [2]byte{'c', 'C'} {
						t.Errorf("server received %d bytes, edges %q", in.n, in.edge[:])
					}
					if err := ss.SendMsg(out); err != nil {
						t.Errorf("server SendMsg: %v", err)
						return
					}
				}
			}()
		}))
		srvDone <- srv.Serve()
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := h2conn.NewClientConn(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := NewClientStream(ctx, cc, &Request{Method: "/grpc.testing.BenchmarkService/StreamingCall", Authority: "x"},
		ClientConfig{Pool: pool, MaxRecv: limit, Codec: viewCodec{}})
	if err != nil {
		t.Fatal(err)
	}
	out := &viewMsg{b: make([]byte, size)}
	out.b[0], out.b[size-1] = 'c', 'C'
	echo := func() {
		t.Helper()
		if err := cs.SendMsg(out, false); err != nil {
			t.Fatalf("client SendMsg: %v", err)
		}
		var in viewMsg
		if err := cs.RecvMsg(&in); err != nil {
			t.Fatalf("client RecvMsg: %v", err)
		}
		if in.n != size || in.edge != [2]byte{'s', 'S'} {
			t.Fatalf("client received %d bytes, edges %q", in.n, in.edge[:])
		}
	}
	const warm, rounds = 3, 16
	for range warm {
		echo()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range rounds {
		echo()
	}
	runtime.ReadMemStats(&after)
	// Each round moves two messages, each sent by one end and received
	// by the other.
	perMsg := float64(after.TotalAlloc-before.TotalAlloc) / (2 * rounds)
	t.Logf("%.0f bytes allocated per %d-byte message (sender and receiver together), %d GCs", perMsg, size, after.NumGC-before.NumGC)
	// A buffer freed on one P is not always found by a Get on another
	// (sync.Pool), and a garbage collection empties the pool's caches, so
	// a message in a while takes a buffer afresh; half the message's size
	// per message allows for that, and fails when either end allocates
	// its buffer per message. The race detector drops pooled items at
	// random.
	if !raceEnabled && perMsg > size/2 {
		t.Errorf("%.0f bytes allocated per %d-byte message; want at most %d", perMsg, size, size/2)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var in viewMsg
	if err := cs.RecvMsg(&in); err != io.EOF {
		t.Fatalf("final RecvMsg: %v; want io.EOF", err)
	}
	cs.Release()
	cc.Close()
	<-srvDone
	deadline := time.Now().Add(5 * time.Second)
	for pool.Outstanding() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Errorf("%d pool buffers outstanding", n)
	}
}
