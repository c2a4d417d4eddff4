package leangrpc_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// TestSendAfterCallEnded: once the call's context has ended, SendMsg
// returns io.EOF on a client-streaming call and nil on a server-streaming
// one (whose stub returns SendMsg's error as the call's), and RecvMsg
// returns the status, as grpc-go's client does.
func TestSendAfterCallEnded(t *testing.T) {
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{}, clientSettings{})
		tests := []struct {
			name    string
			desc    grpc.StreamDesc
			method  string
			wantErr error
		}{
			{"bidi", grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpc.testing.TestService/FullDuplexCall", io.EOF},
			{"server-streaming", grpc.StreamDesc{ServerStreams: true}, "/grpc.testing.TestService/StreamingOutputCall", nil},
		}
		for _, tc := range tests {
			ctx, cancel := context.WithCancel(context.Background())
			cs, err := e.cc.NewStream(ctx, &tc.desc, tc.method)
			if err != nil {
				t.Fatalf("%s: NewStream: %v", tc.name, err)
			}
			cancel()
			time.Sleep(20 * time.Millisecond) // let the cancellation reach the stream
			req := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 1000)}}
			if err := cs.SendMsg(req); err != tc.wantErr {
				t.Errorf("%s: SendMsg after cancel = %v, want %v", tc.name, err, tc.wantErr)
			}
			if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); status.Code(err) != codes.Canceled {
				t.Errorf("%s: RecvMsg after cancel = %v, want code %v", tc.name, err, codes.Canceled)
			}
		}
	})
}
