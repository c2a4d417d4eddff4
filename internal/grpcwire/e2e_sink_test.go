package grpcwire

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// TestStreamLandingEndToEnd streams messages of changing sizes both ways
// over loopback TCP between two engines, so that large ones land in their
// buffers (guessed right, guessed too long, too short, from queued bytes)
// and small ones pass as payloads: each message must arrive intact and in
// order, and every pooled buffer must come back.
func TestStreamLandingEndToEnd(t *testing.T) {
	for _, pooled := range []bool{true, false} {
		t.Run(map[bool]string{true: "pooled", false: "vec"}[pooled], func(t *testing.T) {
			testStreamLanding(t, pooled)
		})
	}
}

func testStreamLanding(t *testing.T, pooled bool) {
	sizes := []int{300000, 300000, 300000, 70000, 70000, 500000, 10, 300000, 5000, 5000, 2100, 1 << 20, 1 << 20, 0, 40000}
	body := func(i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*31 + j*7 + j>>10)
		}
		return b
	}
	pool := bufpool.New(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := h2conn.Config{Pool: pool, PooledReads: pooled}
	srvDone := make(chan error, 1)
	var srv *h2conn.Conn
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			srvDone <- err
			return
		}
		srv = h2conn.NewServerConn(nc, cfg, grpcHandler(pool, func(ss *ServerStream) {
			for i := 0; ; i++ {
				var m grpc_testing.SimpleRequest
				err := ss.RecvMsg(&m)
				if err == io.EOF {
					ss.Finish(status.New(0, ""))
					return
				}
				if err != nil {
					t.Errorf("server RecvMsg %d: %v", i, err)
					ss.Finish(status.Convert(err))
					return
				}
				if want := body(i, sizes[i]); !bytes.Equal(m.GetPayload().GetBody(), want) {
					t.Errorf("server: message %d of %d bytes differs", i, sizes[i])
				}
				// The response is the next size's body, so both
				// directions see every size.
				k := (i + 1) % len(sizes)
				out := &grpc_testing.SimpleResponse{Payload: &grpc_testing.Payload{Body: body(k, sizes[k])}}
				if err := ss.SendMsg(out); err != nil {
					t.Errorf("server SendMsg %d: %v", i, err)
					return
				}
			}
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := NewClientStream(ctx, cc, &Request{Method: "/grpc.testing.BenchmarkService/StreamingCall", Authority: "x"}, ClientConfig{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	for i := range sizes {
		in := &grpc_testing.SimpleRequest{Payload: &grpc_testing.Payload{Body: body(i, sizes[i])}}
		if err := cs.SendMsg(in, false); err != nil {
			t.Fatalf("client SendMsg %d: %v", i, err)
		}
		var out grpc_testing.SimpleResponse
		if err := cs.RecvMsg(&out); err != nil {
			t.Fatalf("client RecvMsg %d: %v", i, err)
		}
		k := (i + 1) % len(sizes)
		if !bytes.Equal(out.GetPayload().GetBody(), body(k, sizes[k])) {
			t.Fatalf("client: response %d of %d bytes differs", i, sizes[k])
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var out grpc_testing.SimpleResponse
	if err := cs.RecvMsg(&out); err != io.EOF {
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

// TestStreamLandingOversize: after a large message the receiver guesses the
// next is as long; a next one over the receive limit is refused on its
// prefix with ResourceExhausted all the same, both ends see it, and the
// guessed buffer is freed.
func TestStreamLandingOversize(t *testing.T) {
	pool := bufpool.New(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := h2conn.Config{Pool: pool, PooledReads: true}
	const limit = 400000
	got := make(chan error, 1)
	srvDone := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			srvDone <- err
			return
		}
		srv := h2conn.NewServerConn(nc, cfg, h2conn.HandlerFunc(func(st *h2conn.Stream) {
			req, _ := ParseRequest(st.Headers())
			ss := NewServerStream(context.Background(), st, req, &ServerConfig{Pool: pool, MaxRecv: limit})
			go func() {
				defer st.Release()
				var m grpc_testing.SimpleRequest
				if err := ss.RecvMsg(&m); err != nil {
					got <- err
					ss.Finish(status.Convert(err))
					return
				}
				err := ss.RecvMsg(&m)
				got <- err
				ss.Finish(status.Convert(err))
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := NewClientStream(ctx, cc, &Request{Method: "/grpc.testing.BenchmarkService/StreamingCall", Authority: "x"}, ClientConfig{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{300000, 500000} {
		in := &grpc_testing.SimpleRequest{Payload: &grpc_testing.Payload{Body: make([]byte, n)}}
		if err := cs.SendMsg(in, false); err != nil {
			break // the server may have ended the call already
		}
	}
	if err := <-got; status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("server RecvMsg: %v; want ResourceExhausted", err)
	}
	var out grpc_testing.SimpleResponse
	if err := cs.RecvMsg(&out); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("client RecvMsg: %v; want ResourceExhausted", err)
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
