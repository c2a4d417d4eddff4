package leangrpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// fill sets every byte of b to v.
func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// allBytes reports whether every byte of b is v.
func allBytes(b []byte, v byte) bool {
	return len(bytes.Trim(b, string([]byte{v}))) == 0
}

// TestLargeFieldsReusedAfterSend sends messages whose large bytes field
// leangrpc references rather than copies, and overwrites that field's
// buffer as soon as Send returns (grpc-go's contract only forbids changing
// it before): what arrives must be what was sent, in both directions.
func TestLargeFieldsReusedAfterSend(t *testing.T) {
	const size, rounds, streams = 1 << 20, 12, 4
	forStacks(t, func(t *testing.T, client, server stack) {
		srv := serveOn(t, server.lean, streamService(func(_ any, ss grpc.ServerStream) error {
			out := make([]byte, size)
			for {
				var req testpb.SimpleRequest
				if err := ss.RecvMsg(&req); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				body := req.GetPayload().GetBody()
				if len(body) != size || !allBytes(body, body[0]) {
					return fmt.Errorf("request of %d bytes changed on the way", len(body))
				}
				fill(out, body[0]+1)
				if err := ss.SendMsg(&testpb.SimpleResponse{Payload: &testpb.Payload{Body: out}}); err != nil {
					return err
				}
				fill(out, 0xee)
			}
		}), nil)
		cc := dialOn(t, client.lean, srv.addr)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// Several streams on the connection, so that a message's pieces
		// are often written by another stream's goroutine.
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := reuseAfterSend(ctx, cc, size, rounds); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}

// reuseAfterSend runs one stream of TestLargeFieldsReusedAfterSend.
func reuseAfterSend(ctx context.Context, cc grpc.ClientConnInterface, size int, rounds byte) error {
	cs, err := cc.NewStream(ctx, bidiDesc, streamMethod)
	if err != nil {
		return err
	}
	in := make([]byte, size)
	for k := byte(1); k <= rounds; k++ {
		fill(in, k)
		if err := cs.SendMsg(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: in}}); err != nil {
			return fmt.Errorf("SendMsg %d: %v", k, err)
		}
		fill(in, 0xee)
		var resp testpb.SimpleResponse
		if err := cs.RecvMsg(&resp); err != nil {
			return fmt.Errorf("RecvMsg %d: %v", k, err)
		}
		if body := resp.GetPayload().GetBody(); len(body) != size || !allBytes(body, k+1) {
			return fmt.Errorf("response %d changed on the way (%d bytes)", k, len(body))
		}
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	if err := cs.RecvMsg(&testpb.SimpleResponse{}); err != io.EOF {
		return fmt.Errorf("end of stream: %v", err)
	}
	return nil
}

// TestLargeFieldsSendCanceled cancels a call whose large message waits for
// flow-control window the server never gives (its handler does not read):
// SendMsg must return, and every buffer come back.
func TestLargeFieldsSendCanceled(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		if !client.lean {
			t.Skip("the sending side under test is leangrpc's client")
		}
		srv := serveOn(t, server.lean, streamService(func(_ any, ss grpc.ServerStream) error {
			<-ss.Context().Done()
			return ss.Context().Err()
		}), nil)
		cc := dialOn(t, client.lean, srv.addr)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cs, err := cc.NewStream(ctx, bidiDesc, streamMethod)
		if err != nil {
			t.Fatal(err)
		}
		sent := make(chan error, 1)
		go func() {
			msg := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 3<<20)}}
			for {
				if err := cs.SendMsg(msg); err != nil {
					sent <- err
					return
				}
			}
		}()
		time.Sleep(100 * time.Millisecond) // the windows fill up
		cancel()
		select {
		case err := <-sent:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("SendMsg after cancel: %v, want io.EOF", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("SendMsg still blocked 10 s after the call was canceled")
		}
	})
}
