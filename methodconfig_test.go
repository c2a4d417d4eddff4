package leangrpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// methodConfig is a service config with one method config for sc.S.
func methodConfig(fields string) string {
	return `{"methodConfig": [{"name": [{"service": "sc.S"}]` + fields + `}]}`
}

// deadlineSeen answers with the time left to the handler's deadline,
// "none" without one.
func deadlineSeen(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	body := "none"
	if dl, ok := ctx.Deadline(); ok {
		body = time.Until(dl).String()
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: []byte(body)}}, nil
}

// The method config's timeout bounds the call: the earlier of it and the
// context's deadline applies, on both stacks.
func TestMethodConfigTimeout(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		for _, c := range []struct {
			timeout string // the config's
			ctx     time.Duration
			max     time.Duration // the most the server may see left; 0: no deadline
		}{
			{`, "timeout": "2s"`, 0, 2 * time.Second},
			{`, "timeout": "30s"`, time.Second, time.Second},
			{`, "timeout": "1s"`, 20 * time.Second, time.Second},
			{`, "waitForReady": false`, 0, 0},
		} {
			s := &scServer{unary: deadlineSeen}
			cc := startSC(t, client, server, s, methodConfig(c.timeout), scOptions{})
			ctx := context.Background()
			if c.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.ctx)
				defer cancel()
			}
			resp := new(testpb.SimpleResponse)
			if err := cc.Invoke(ctx, scUnary, &testpb.SimpleRequest{}, resp); err != nil {
				t.Fatalf("%s: %v", c.timeout, err)
			}
			got := string(resp.GetPayload().GetBody())
			if c.max == 0 {
				if got != "none" {
					t.Errorf("%s, context %v: the server sees %s left, want no deadline", c.timeout, c.ctx, got)
				}
				continue
			}
			left, err := time.ParseDuration(got)
			if err != nil || left > c.max || left <= 0 {
				t.Errorf("%s, context %v: the server sees %s left, want at most %v", c.timeout, c.ctx, got, c.max)
			}
		}

		// A call that outlasts the config's timeout ends with
		// DeadlineExceeded, unary or streaming.
		s := &scServer{
			unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			stream: func(_ int, ss grpc.ServerStream) error {
				<-ss.Context().Done()
				return ss.Context().Err()
			},
		}
		cc := startSC(t, client, server, s, methodConfig(`, "timeout": "0.05s"`), scOptions{})
		if err := cc.Invoke(context.Background(), scUnary, &testpb.SimpleRequest{}, new(testpb.SimpleResponse)); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("unary call: %v, want DeadlineExceeded", err)
		}
		st, err := cc.NewStream(context.Background(), scBidi, scStream)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.RecvMsg(new(testpb.SimpleResponse)); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("stream: %v, want DeadlineExceeded", err)
		}
		if _, ok := st.Context().Deadline(); !ok {
			t.Error("the stream's context has no deadline, want the config's")
		}
	})
}

// waitForReady from the method config makes a call wait for a connection
// where it would fail fast; a call option says otherwise.
func TestMethodConfigWaitForReady(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens: connecting fails
	for _, lean := range []bool{true, false} {
		for _, c := range []struct {
			config string
			opts   []grpc.CallOption
			want   codes.Code
		}{
			{`, "waitForReady": true`, nil, codes.DeadlineExceeded},
			{`, "waitForReady": true`, []grpc.CallOption{grpc.WaitForReady(false)}, codes.Unavailable},
			{`, "waitForReady": false`, nil, codes.Unavailable},
			{`, "waitForReady": false`, []grpc.CallOption{grpc.WaitForReady(true)}, codes.DeadlineExceeded},
		} {
			cc := dialSC(t, lean, addr, methodConfig(c.config), scOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err := cc.Invoke(ctx, scUnary, &testpb.SimpleRequest{}, new(testpb.SimpleResponse), c.opts...)
			cancel()
			if status.Code(err) != c.want {
				t.Errorf("lean=%v %s with %d call options: %v, want %v", lean, c.config, len(c.opts), err, c.want)
			}
		}
	}
}

// The method config's message size limits apply, the smaller of them and
// a call option's winning.
func TestMethodConfigMessageSizes(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		// The response has the request's ResponseSize bytes.
		answer := func(_ context.Context, _ int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
		}
		for _, c := range []struct {
			config    string
			opts      []grpc.CallOption
			req, resp int // body sizes
			want      codes.Code
		}{
			{`, "maxRequestMessageBytes": 50`, nil, 100, 0, codes.ResourceExhausted},
			{`, "maxRequestMessageBytes": 50`, []grpc.CallOption{grpc.MaxCallSendMsgSize(1000)}, 100, 0, codes.ResourceExhausted},
			{`, "maxRequestMessageBytes": 1000`, []grpc.CallOption{grpc.MaxCallSendMsgSize(50)}, 100, 0, codes.ResourceExhausted},
			{`, "maxRequestMessageBytes": 1000`, nil, 100, 0, codes.OK},
			{`, "maxResponseMessageBytes": 50`, nil, 0, 100, codes.ResourceExhausted},
			{`, "maxResponseMessageBytes": 50`, []grpc.CallOption{grpc.MaxCallRecvMsgSize(1000)}, 0, 100, codes.ResourceExhausted},
			{`, "maxResponseMessageBytes": 1000`, []grpc.CallOption{grpc.MaxCallRecvMsgSize(50)}, 0, 100, codes.ResourceExhausted},
			{`, "maxResponseMessageBytes": 1000`, nil, 0, 100, codes.OK},
			// Above the default receive limit (4 MiB): the config's
			// applies.
			{`, "maxResponseMessageBytes": 8388608`, nil, 0, 5 << 20, codes.OK},
			{`, "maxRequestMessageBytes": 1000`, nil, 0, 5 << 20, codes.ResourceExhausted},
		} {
			s := &scServer{unary: answer}
			cc := startSC(t, client, server, s, methodConfig(c.config), scOptions{})
			req := &testpb.SimpleRequest{ResponseSize: int32(c.resp), Payload: &testpb.Payload{Body: make([]byte, c.req)}}
			err := cc.Invoke(context.Background(), scUnary, req, new(testpb.SimpleResponse), c.opts...)
			if status.Code(err) != c.want {
				t.Errorf("%s, %d call options, %d-byte request, %d-byte response: %v, want %v", c.config, len(c.opts), c.req, c.resp, err, c.want)
			}
		}
	})
}
