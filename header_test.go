package leangrpc_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestClientStreamHeader: ClientStream.Header returns the response headers
// when the server sent them, and (nil, nil) when the call ended without
// them (Trailers-Only with or without an error, a canceled context): the
// call's error is RecvMsg's to report, as with grpc-go.
func TestClientStreamHeader(t *testing.T) {
	cases := []struct {
		name    string
		handler grpc.StreamHandler
		cancel  bool // cancel the call's context before asking for the headers
		wantMD  bool
		wantEnd codes.Code // RecvMsg's code afterwards; OK means io.EOF
	}{
		{name: "headers", wantMD: true, wantEnd: codes.OK, handler: func(_ any, stream grpc.ServerStream) error {
			if err := stream.SendHeader(metadata.Pairs("k", "v")); err != nil {
				return err
			}
			for {
				if err := stream.RecvMsg(new(testpb.Empty)); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
			}
		}},
		{name: "trailers-only-error", wantEnd: codes.NotFound, handler: func(any, grpc.ServerStream) error {
			return status.Error(codes.NotFound, "nothing here")
		}},
		{name: "trailers-only-ok", wantEnd: codes.OK, handler: func(any, grpc.ServerStream) error {
			return nil
		}},
		{name: "canceled", cancel: true, wantEnd: codes.Canceled, handler: func(_ any, stream grpc.ServerStream) error {
			<-stream.Context().Done()
			return nil
		}},
	}
	forStacks(t, func(t *testing.T, client, server stack) {
		for _, tc := range cases {
			srv := serveOn(t, server.lean, streamService(tc.handler), struct{}{})
			cc := dialOn(t, client.lean, srv.addr)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			cs, err := cc.NewStream(ctx, bidiDesc, streamMethod)
			if err != nil {
				cancel()
				t.Fatalf("%s: NewStream: %v", tc.name, err)
			}
			if tc.cancel {
				cancel()
			} else {
				cs.CloseSend()
			}
			md, err := cs.Header()
			if err != nil {
				t.Errorf("%s: Header() error = %v, want nil", tc.name, err)
			}
			if got := md.Get("k"); tc.wantMD && (len(got) != 1 || got[0] != "v") {
				t.Errorf("%s: Header() = %v, want k: v", tc.name, md)
			} else if !tc.wantMD && md != nil {
				t.Errorf("%s: Header() = %v, want nil", tc.name, md)
			}
			err = cs.RecvMsg(new(testpb.Empty))
			if tc.wantEnd == codes.OK && err != io.EOF || tc.wantEnd != codes.OK && status.Code(err) != tc.wantEnd {
				t.Errorf("%s: RecvMsg = %v, want code %v (io.EOF for OK)", tc.name, err, tc.wantEnd)
			}
			cancel()
		}
	})
}
