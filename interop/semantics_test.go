package interop_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	"google.golang.org/grpc/status"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/leangrpc/leangrpc"
)

// TestSendAfterDeadline pins down, deterministically, the client stream
// behaviour that timeout_on_sleeping_server depends on and only hits when
// the 1 ms deadline expires between FullDuplexCall and Send: once the
// deadline has passed, SendMsg returns nil or io.EOF (the stream ended for a
// reason the caller did not cause), and RecvMsg returns DeadlineExceeded.
// grpc-go's client is the reference and always runs.
func TestSendAfterDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, interop.NewTestServer())
	go srv.Serve(lis)
	defer srv.Stop()
	target := lis.Addr().String()

	dialers := []struct {
		name string
		dial func() (grpc.ClientConnInterface, func(), error)
	}{
		{"grpcgo", func() (grpc.ClientConnInterface, func(), error) {
			cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, nil, err
			}
			return cc, func() { cc.Close() }, nil
		}},
		{"lean", func() (grpc.ClientConnInterface, func(), error) {
			cc, err := leangrpc.NewClient(target, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, nil, err
			}
			return cc, func() { cc.Close() }, nil
		}},
	}
	for _, d := range dialers {
		t.Run(d.name, func(t *testing.T) {
			cc, closeCC, err := d.dial()
			if err != nil {
				t.Fatal(err)
			}
			defer closeCC()
			tc := testgrpc.NewTestServiceClient(cc)
			// Connect first so that the deadline below only covers the call.
			if _, err := tc.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
				t.Fatalf("EmptyCall: %v", err)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			stream, err := tc.FullDuplexCall(ctx)
			if err != nil {
				t.Fatalf("FullDuplexCall: %v", err)
			}
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // let the cancellation reach the stream
			req := &testpb.StreamingOutputCallRequest{Payload: interop.ClientNewPayload(testpb.PayloadType_COMPRESSABLE, 1000)}
			if err := stream.Send(req); err != nil && err != io.EOF {
				t.Errorf("Send after the deadline = %v (code %v), want nil or io.EOF as grpc-go returns", err, status.Code(err))
			}
			if _, err := stream.Recv(); status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("Recv after the deadline = %v, want code %v", err, codes.DeadlineExceeded)
			}
		})
	}
}
