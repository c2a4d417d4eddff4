package leangrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// scServer is a server of either stack with one unary method (U) and one
// bidi stream (S) whose handlers the test sets; it counts the attempts it
// sees and the grpc-previous-rpc-attempts of each.
type scServer struct {
	unary  func(ctx context.Context, attempt int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error)
	stream func(attempt int, ss grpc.ServerStream) error

	mu       sync.Mutex
	attempts int
	prev     []string    // grpc-previous-rpc-attempts of each attempt ("" when absent)
	at       []time.Time // when each attempt began
}

const (
	scUnary  = "/sc.S/U"
	scStream = "/sc.S/S"
)

var scBidi = &grpc.StreamDesc{StreamName: "S", ServerStreams: true, ClientStreams: true}

func (s *scServer) begin(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	s.prev = append(s.prev, strings.Join(md.Get("grpc-previous-rpc-attempts"), ","))
	s.at = append(s.at, time.Now())
	return s.attempts
}

func (s *scServer) seen() (int, []string, []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts, append([]string(nil), s.prev...), append([]time.Time(nil), s.at...)
}

func (s *scServer) desc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "sc.S",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "U", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			req := new(testpb.SimpleRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			return s.unary(ctx, s.begin(ctx), req)
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "S", ServerStreams: true, ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			return s.stream(s.begin(ss.Context()), ss)
		}}},
	}
}

// scOptions are a client's options beyond plaintext and the service config.
type scOptions struct {
	lean []leangrpc.DialOption
	grpc []grpc.DialOption
}

// dialSC returns a client of the given stack for addr with js as its
// default service config, closed at the end of the test.
func dialSC(t *testing.T, lean bool, addr, js string, o scOptions) grpc.ClientConnInterface {
	t.Helper()
	if lean {
		opts := append([]leangrpc.DialOption{leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithDefaultServiceConfig(js)}, o.lean...)
		cc, err := leangrpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(js)}, o.grpc...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// startSC serves s on the server stack and returns a client of the client
// stack with the service config js.
func startSC(t *testing.T, client, server stack, s *scServer, js string, o scOptions) grpc.ClientConnInterface {
	t.Helper()
	srv := serveOn(t, server.lean, s.desc(), nil)
	return dialSC(t, client.lean, srv.addr, js, o)
}

// retryConfig is a service config with a retry policy for sc.S; extra is
// added to the top level (retryThrottling).
func retryConfig(maxAttempts int, codes, extra string) string {
	return fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "sc.S"}], "retryPolicy": {
		"maxAttempts": %d, "initialBackoff": "0.005s", "maxBackoff": "0.02s",
		"backoffMultiplier": 2, "retryableStatusCodes": [%s]}}]%s}`, maxAttempts, codes, extra)
}

var unavailable = status.Error(codes.Unavailable, "try again")

// failFirst answers Unavailable to the first n attempts and OK after.
func failFirst(n int) func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return func(_ context.Context, attempt int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if attempt <= n {
			return nil, unavailable
		}
		return &testpb.SimpleResponse{}, nil
	}
}

func callU(cc grpc.ClientConnInterface, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cc.Invoke(ctx, scUnary, &testpb.SimpleRequest{}, new(testpb.SimpleResponse), opts...)
}

// A unary call retried under a policy: the same attempts, headers and
// final status at a leangrpc and a grpc-go server from a leangrpc and a
// grpc-go client.
func TestRetryUnary(t *testing.T) {
	cases := []struct {
		name     string
		js       string
		failures int // attempts answered Unavailable before OK
		opts     scOptions
		attempts int
		err      string // "" for success
	}{
		{"retried until OK", retryConfig(5, `"UNAVAILABLE"`, ""), 2, scOptions{}, 3, ""},
		{"attempts exhausted", retryConfig(3, `"UNAVAILABLE"`, ""), 10, scOptions{}, 3,
			"max retries exhausted: failed after 3 attempts: rpc error: code = Unavailable desc = try again"},
		{"numeric code", retryConfig(5, `"ABORTED", 14`, ""), 10, scOptions{}, 5,
			"max retries exhausted: failed after 5 attempts: rpc error: code = Unavailable desc = try again"},
		{"other code only", retryConfig(5, `"ABORTED"`, ""), 10, scOptions{}, 1, "rpc error: code = Unavailable desc = try again"},
		{"maxAttempts capped at 5", retryConfig(9, `"UNAVAILABLE"`, ""), 10, scOptions{}, 5,
			"max retries exhausted: failed after 5 attempts: rpc error: code = Unavailable desc = try again"},
		{"WithMaxCallAttempts", retryConfig(9, `"UNAVAILABLE"`, ""), 10,
			scOptions{lean: []leangrpc.DialOption{leangrpc.WithMaxCallAttempts(2)}, grpc: []grpc.DialOption{grpc.WithMaxCallAttempts(2)}}, 2,
			"max retries exhausted: failed after 2 attempts: rpc error: code = Unavailable desc = try again"},
		{"WithDisableRetry", retryConfig(5, `"UNAVAILABLE"`, ""), 10,
			scOptions{lean: []leangrpc.DialOption{leangrpc.WithDisableRetry()}, grpc: []grpc.DialOption{grpc.WithDisableRetry()}}, 1,
			"rpc error: code = Unavailable desc = try again"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forStacks(t, func(t *testing.T, client, server stack) {
				s := &scServer{unary: failFirst(c.failures)}
				cc := startSC(t, client, server, s, c.js, c.opts)
				err := callU(cc)
				if got := fmt.Sprint(err); (err == nil) != (c.err == "") || err != nil && got != c.err {
					t.Errorf("call: %v, want %q", err, c.err)
				}
				n, prev, _ := s.seen()
				if n != c.attempts {
					t.Errorf("%d attempts at the server, want %d", n, c.attempts)
				}
				for i, p := range prev {
					if want := fmt.Sprint(i); i > 0 && p != want || i == 0 && p != "" {
						t.Errorf("attempt %d: grpc-previous-rpc-attempts %q, want %q", i+1, p, want)
					}
				}
			})
		})
	}
}

// Once the server sent response headers the call is committed: its
// failure is not retried.
func TestRetryCommitsOnHeaders(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		s := &scServer{
			unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				grpc.SendHeader(ctx, metadata.Pairs("h", "v"))
				return nil, unavailable
			},
			stream: func(_ int, ss grpc.ServerStream) error {
				ss.SendHeader(metadata.Pairs("h", "v"))
				return unavailable
			},
		}
		cc := startSC(t, client, server, s, retryConfig(5, `"UNAVAILABLE"`, ""), scOptions{})
		if err := callU(cc); status.Code(err) != codes.Unavailable {
			t.Errorf("unary call: %v, want Unavailable", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := cc.NewStream(ctx, scBidi, scStream)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.RecvMsg(new(testpb.SimpleResponse)); status.Code(err) != codes.Unavailable {
			t.Errorf("stream: %v, want Unavailable", err)
		}
		if n, _, _ := s.seen(); n != 2 {
			t.Errorf("%d attempts at the server for a unary call and a stream, want 2", n)
		}
	})
}

// grpc-retry-pushback-ms: a negative or malformed value stops the
// retries; a valid one sets the wait before the next attempt.
func TestRetryPushback(t *testing.T) {
	for _, c := range []struct {
		value    string
		attempts int
	}{{"-1", 1}, {"soon", 1}, {"300", 2}} {
		t.Run(c.value, func(t *testing.T) {
			forStacks(t, func(t *testing.T, client, server stack) {
				s := &scServer{unary: func(ctx context.Context, attempt int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
					if attempt == 1 {
						grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", c.value))
						return nil, unavailable
					}
					return &testpb.SimpleResponse{}, nil
				}}
				cc := startSC(t, client, server, s, retryConfig(5, `"UNAVAILABLE"`, ""), scOptions{})
				err := callU(cc)
				n, _, at := s.seen()
				if n != c.attempts {
					t.Fatalf("%d attempts, want %d (call: %v)", n, c.attempts, err)
				}
				if n == 1 {
					if status.Code(err) != codes.Unavailable {
						t.Errorf("call: %v, want Unavailable", err)
					}
					return
				}
				if err != nil {
					t.Errorf("call: %v", err)
				}
				// The policy's backoff is at most 20ms; the pushback asks
				// for 300ms.
				if gap := at[1].Sub(at[0]); gap < 300*time.Millisecond {
					t.Errorf("second attempt %v after the first, want at least the pushback's 300ms", gap)
				}
			})
		})
	}
}

// Retry throttling: each failure a policy could retry takes a token, and
// retries stop once half the tokens are gone, across the ClientConn's
// calls.
func TestRetryThrottling(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		s := &scServer{unary: failFirst(1000)}
		cc := startSC(t, client, server, s, retryConfig(5, `"UNAVAILABLE"`, `, "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}`), scOptions{})
		// Tokens 10 → 5 over the first call's five attempts: the fifth
		// failure leaves 5, not above half, so the call is not retried
		// again and ends with the server's status, not "exhausted".
		if err := callU(cc); fmt.Sprint(err) != unavailable.Error() {
			t.Errorf("first call: %v, want %v", err, unavailable)
		}
		if n, _, _ := s.seen(); n != 5 {
			t.Errorf("first call: %d attempts, want 5", n)
		}
		// The second call's first failure leaves 4: throttled.
		callU(cc)
		if n, _, _ := s.seen(); n != 6 {
			t.Errorf("second call: %d attempts in all, want 6", n-5)
		}
	})
}

// grpc.MaxRetryRPCBufferSize: a request larger than the retry buffer
// commits the call, which is then not retried.
func TestRetryBufferLimit(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		s := &scServer{
			unary: failFirst(1000),
			stream: func(_ int, ss grpc.ServerStream) error {
				ss.RecvMsg(new(testpb.SimpleRequest))
				return unavailable
			},
		}
		cc := startSC(t, client, server, s, retryConfig(5, `"UNAVAILABLE"`, ""), scOptions{})
		big := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 100)}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cc.Invoke(ctx, scUnary, big, new(testpb.SimpleResponse), grpc.MaxRetryRPCBufferSize(50)); status.Code(err) != codes.Unavailable {
			t.Errorf("unary: %v, want Unavailable", err)
		}
		st, err := cc.NewStream(ctx, scBidi, scStream, grpc.MaxRetryRPCBufferSize(50))
		if err != nil {
			t.Fatal(err)
		}
		st.SendMsg(big)
		st.CloseSend()
		if err := st.RecvMsg(new(testpb.SimpleResponse)); status.Code(err) != codes.Unavailable {
			t.Errorf("stream: %v, want Unavailable", err)
		}
		if n, _, _ := s.seen(); n != 2 {
			t.Errorf("%d attempts for a unary call and a stream, want 2", n)
		}
	})
}

// A stream's failed attempt is retried with the messages sent so far and
// the half-close replayed, in order, and the messages sent after.
func TestRetryStreamReplay(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		var mu sync.Mutex
		var got []string // the bodies the answering attempt received
		s := &scServer{stream: func(attempt int, ss grpc.ServerStream) error {
			var bodies []string
			for {
				req := new(testpb.SimpleRequest)
				err := ss.RecvMsg(req)
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				bodies = append(bodies, string(req.GetPayload().GetBody()))
				if attempt < 3 && len(bodies) == attempt {
					return unavailable // the first attempt after one message, the second after two
				}
			}
			mu.Lock()
			got = bodies
			mu.Unlock()
			return ss.SendMsg(&testpb.SimpleResponse{Payload: &testpb.Payload{Body: []byte(strings.Join(bodies, ","))}})
		}}
		cc := startSC(t, client, server, s, retryConfig(5, `"UNAVAILABLE"`, ""), scOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := cc.NewStream(ctx, scBidi, scStream)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			// Spaced out, so that some sends find the attempt failed.
			if err := st.SendMsg(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(fmt.Sprint(i))}}); err != nil {
				t.Fatalf("SendMsg %d: %v", i, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		st.CloseSend()
		resp := new(testpb.SimpleResponse)
		if err := st.RecvMsg(resp); err != nil {
			t.Fatalf("RecvMsg: %v", err)
		}
		if b := string(resp.GetPayload().GetBody()); b != "0,1,2,3,4" {
			t.Errorf("response %q, want the five messages in order", b)
		}
		if err := st.RecvMsg(resp); err != io.EOF {
			t.Errorf("end: %v, want io.EOF", err)
		}
		n, prev, _ := s.seen()
		if n != 3 || prev[1] != "1" || prev[2] != "2" {
			t.Errorf("%d attempts with grpc-previous-rpc-attempts %q, want 3 with \"\", 1, 2", n, prev)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 5 {
			t.Errorf("answering attempt received %q", got)
		}
	})
}

// A stream whose attempts all fail: the call that sees the retries end
// (RecvMsg, or Header, which then reports nothing) gets grpc-go's
// exhausted error, as OnFinish does; later calls get the last attempt's
// status, as grpc-go's do.
func TestRetryStreamExhausted(t *testing.T) {
	exhausted := "max retries exhausted: failed after 3 attempts: " + unavailable.Error()
	forStacks(t, func(t *testing.T, client, server stack) {
		s := &scServer{stream: func(int, grpc.ServerStream) error { return unavailable }}
		cc := startSC(t, client, server, s, retryConfig(3, `"UNAVAILABLE"`, ""), scOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, headerFirst := range []bool{false, true} {
			var finished []error
			st, err := cc.NewStream(ctx, scBidi, scStream, grpc.OnFinish(func(err error) { finished = append(finished, err) }))
			if err != nil {
				t.Fatal(err)
			}
			if headerFirst {
				if md, err := st.Header(); md != nil || err != nil {
					t.Errorf("Header: %v, %v; want nil, nil", md, err)
				}
			} else if err := st.RecvMsg(new(testpb.SimpleResponse)); fmt.Sprint(err) != exhausted || status.Code(err) != codes.Unavailable {
				t.Errorf("RecvMsg: %v, want %s", err, exhausted)
			}
			if err := st.RecvMsg(new(testpb.SimpleResponse)); fmt.Sprint(err) != unavailable.Error() {
				t.Errorf("headerFirst=%v: RecvMsg after the end: %v, want %v", headerFirst, err, unavailable)
			}
			if len(finished) != 1 || fmt.Sprint(finished[0]) != exhausted {
				t.Errorf("headerFirst=%v: OnFinish calls %v, want one with %s", headerFirst, finished, exhausted)
			}
		}
		if n, _, _ := s.seen(); n != 6 {
			t.Errorf("%d attempts for two streams, want 6", n)
		}
	})
}

// attemptCounter counts the client's Begin and End events and remembers
// the transparent-retry flags.
type attemptCounter struct {
	mu          sync.Mutex
	begin, end  int
	transparent int
}

func (h *attemptCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h *attemptCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h *attemptCounter) HandleConn(context.Context, stats.ConnStats) {}
func (h *attemptCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch s := s.(type) {
	case *stats.Begin:
		h.begin++
		if s.IsTransparentRetryAttempt {
			h.transparent++
		}
	case *stats.End:
		h.end++
	}
}

func (h *attemptCounter) counts() (int, int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.begin, h.end, h.transparent
}

// Stats handlers see each attempt begin and end; the call options see the
// last attempt and OnFinish runs once, with the call's result.
func TestRetryStatsAndCallOptions(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		s := &scServer{
			unary: func(ctx context.Context, attempt int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				grpc.SetTrailer(ctx, metadata.Pairs("attempt", fmt.Sprint(attempt)))
				if attempt < 3 {
					return nil, unavailable
				}
				return &testpb.SimpleResponse{}, nil
			},
			stream: func(attempt int, ss grpc.ServerStream) error {
				ss.SetTrailer(metadata.Pairs("attempt", fmt.Sprint(attempt)))
				if attempt < 6 { // the stream's first two (the unary call had three)
					return unavailable
				}
				return nil
			},
		}
		h := &attemptCounter{}
		o := scOptions{lean: []leangrpc.DialOption{leangrpc.WithStatsHandler(h)}, grpc: []grpc.DialOption{grpc.WithStatsHandler(h)}}
		cc := startSC(t, client, server, s, retryConfig(5, `"UNAVAILABLE"`, ""), o)
		var trailer metadata.MD
		var finished []error
		if err := callU(cc, grpc.Trailer(&trailer), grpc.OnFinish(func(err error) { finished = append(finished, err) })); err != nil {
			t.Fatal(err)
		}
		if got := trailer.Get("attempt"); len(got) != 1 || got[0] != "3" {
			t.Errorf("Trailer call option: attempt %q, want the last (3)", got)
		}
		if len(finished) != 1 || finished[0] != nil {
			t.Errorf("OnFinish calls: %v, want one with nil", finished)
		}
		if b, e, tr := h.counts(); b != 3 || e != 3 || tr != 0 {
			t.Errorf("unary: %d Begin, %d End (%d transparent), want 3, 3, 0", b, e, tr)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := cc.NewStream(ctx, scBidi, scStream, grpc.OnFinish(func(err error) { finished = append(finished, err) }))
		if err != nil {
			t.Fatal(err)
		}
		st.CloseSend()
		if err := st.RecvMsg(new(testpb.SimpleResponse)); err != io.EOF {
			t.Errorf("stream: %v, want io.EOF", err)
		}
		if got := st.Trailer().Get("attempt"); len(got) != 1 || got[0] != "6" {
			t.Errorf("stream Trailer: attempt %q, want the last (6)", got)
		}
		if len(finished) != 2 || finished[1] != nil {
			t.Errorf("OnFinish calls: %v, want a second with nil", finished)
		}
		if b, e, _ := h.counts(); b != 6 || e != 6 {
			t.Errorf("with the stream: %d Begin, %d End, want 6 and 6", b, e)
		}
	})
}

// A retry waits in its backoff no longer than the call's context.
func TestRetryBackoffEndsWithContext(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		s := &scServer{unary: failFirst(1000)}
		js := `{"methodConfig": [{"name": [{"service": "sc.S"}], "retryPolicy": {
			"maxAttempts": 5, "initialBackoff": "100s", "maxBackoff": "100s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
		cc := startSC(t, client, server, s, js, scOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := cc.Invoke(ctx, scUnary, &testpb.SimpleRequest{}, new(testpb.SimpleResponse))
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("call: %v, want DeadlineExceeded", err)
		}
		if n, _, _ := s.seen(); n != 1 {
			t.Errorf("%d attempts, want 1", n)
		}
	})
}

// With nothing listening, a fail-fast call's attempts fail before a stream
// opens; they count as attempts as in grpc-go.
func TestRetryWithoutServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	for _, lean := range []bool{true, false} {
		cc := dialSC(t, lean, addr, retryConfig(2, `"UNAVAILABLE"`, ""), scOptions{})
		err := callU(cc)
		if status.Code(err) != codes.Unavailable || !strings.HasPrefix(status.Convert(err).Message(), "max retries exhausted: failed after 2 attempts") {
			t.Errorf("lean=%v: %v, want Unavailable after 2 attempts", lean, err)
		}
		var se interface{ GRPCStatus() *status.Status }
		if !errors.As(err, &se) {
			t.Errorf("lean=%v: %T is not a status error", lean, err)
		}
	}
}

// BenchmarkServiceConfig/<config>/<call>: a leangrpc unary call (1 KiB
// each way) and a whole short bidi stream (one message each way) between
// a leangrpc client and server, without a service config, with one that
// has no method config, and under a retry policy that never retries.
func BenchmarkServiceConfig(b *testing.B) {
	configs := []struct{ name, js string }{
		{"none", ""},
		{"lb-only", `{"loadBalancingPolicy": "pick_first"}`},
		{"retry-policy", `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
			"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
			"retryableStatusCodes": ["UNAVAILABLE"]}}]}`},
	}
	for _, c := range configs {
		b.Run(c.name, func(b *testing.B) {
			addr, stop := startServerB(b, true)
			defer stop()
			opts := []leangrpc.DialOption{leangrpc.WithTransportCredentials(insecure.NewCredentials())}
			if c.js != "" {
				opts = append(opts, leangrpc.WithDefaultServiceConfig(c.js))
			}
			cc, err := leangrpc.NewClient(addr, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			tc := testgrpc.NewTestServiceClient(cc)
			ctx := context.Background()
			b.Run("unary", func(b *testing.B) {
				req := &testpb.SimpleRequest{ResponseSize: 1024, Payload: payload(1024)}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := tc.UnaryCall(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("stream", func(b *testing.B) {
				req := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 64}}, Payload: payload(64)}
				b.ReportAllocs()
				for b.Loop() {
					s, err := tc.FullDuplexCall(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := s.Send(req); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Recv(); err != nil {
						b.Fatal(err)
					}
					s.CloseSend()
					if _, err := s.Recv(); err != io.EOF {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// Under a retry policy a stream the server refused (never processed) is
// still retried transparently: at once, as an attempt stats handlers see
// as transparent, without grpc-previous-rpc-attempts, and without using
// up the policy's attempts.
func TestRetryPolicyKeepsTransparentRetry(t *testing.T) {
	for _, lean := range []bool{true, false} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		h := &attemptCounter{}
		// maxAttempts 2: a policy retry on top of the transparent one
		// would exhaust it.
		js := `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
			"maxAttempts": 2, "initialBackoff": "0.005s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
			"retryableStatusCodes": ["UNAVAILABLE"]}}]}`
		cc := dialSC(t, lean, lis.Addr().String(), js, scOptions{
			lean: []leangrpc.DialOption{leangrpc.WithStatsHandler(h)}, grpc: []grpc.DialOption{grpc.WithStatsHandler(h)}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errc := make(chan error, 1)
		go func() {
			_, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{})
			errc <- err
		}()
		nc, err := lis.Accept()
		if err != nil {
			t.Fatal(err)
		}
		p := h2test.NewPeer(t, nc, h2test.ServerRole)
		p.Greet()
		p.WantHeaders(1)
		p.WantBody(1, false)
		p.WriteRST(1, h2frame.ErrCodeRefusedStream)
		hd := p.WantHeaders(3)
		p.WantBody(3, false)
		p.WriteHeaders(3, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "14", "grpc-message", "busy")
		hd5 := p.WantHeaders(5)
		p.WantBody(5, false)
		p.WriteHeaders(5, false, ":status", "200", "content-type", "application/grpc")
		p.WriteData(5, false, grpcFrame(0, nil))
		p.WriteHeaders(5, true, "grpc-status", "0")
		if err := <-errc; err != nil {
			t.Errorf("lean=%v: %v", lean, err)
		}
		cancel()
		if v := hd.Get("grpc-previous-rpc-attempts"); v != "" {
			t.Errorf("lean=%v: the transparent retry has grpc-previous-rpc-attempts %q", lean, v)
		}
		if v := hd5.Get("grpc-previous-rpc-attempts"); v != "1" {
			t.Errorf("lean=%v: the policy's retry has grpc-previous-rpc-attempts %q, want 1", lean, v)
		}
		waitFor(t, "three attempts' End", func() bool { _, e, _ := h.counts(); return e == 3 })
		if b, e, tr := h.counts(); b != 3 || e != 3 || tr != 1 {
			t.Errorf("lean=%v: %d Begin, %d End, %d transparent; want 3, 3, 1", lean, b, e, tr)
		}
		nc.Close()
		lis.Close()
	}
}

// A bidi stream sending on one goroutine and receiving on another: the
// first attempt fails mid-stream, the second echoes every message, and
// the receiver gets them all, in order, once each.
func TestRetryStreamConcurrentSendRecv(t *testing.T) {
	forStacks(t, func(t *testing.T, client, server stack) {
		s := &scServer{stream: func(attempt int, ss grpc.ServerStream) error {
			for n := 0; ; n++ {
				req := new(testpb.SimpleRequest)
				if err := ss.RecvMsg(req); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				if attempt == 1 && n == 3 {
					return unavailable
				}
				if attempt > 1 {
					if err := ss.SendMsg(&testpb.SimpleResponse{Payload: req.GetPayload()}); err != nil {
						return err
					}
				}
			}
		}}
		cc := startSC(t, client, server, s, retryConfig(5, `"UNAVAILABLE"`, ""), scOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := cc.NewStream(ctx, scBidi, scStream)
		if err != nil {
			t.Fatal(err)
		}
		const n = 20
		sent := make(chan error, 1)
		go func() {
			for i := range n {
				if err := st.SendMsg(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(fmt.Sprint(i))}}); err != nil {
					sent <- fmt.Errorf("SendMsg %d: %v", i, err)
					return
				}
				time.Sleep(time.Millisecond)
			}
			sent <- st.CloseSend()
		}()
		var got []string
		for {
			resp := new(testpb.SimpleResponse)
			err := st.RecvMsg(resp)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("RecvMsg after %d: %v", len(got), err)
			}
			got = append(got, string(resp.GetPayload().GetBody()))
		}
		if err := <-sent; err != nil {
			t.Error(err)
		}
		for i := range n {
			if i >= len(got) || got[i] != fmt.Sprint(i) {
				t.Fatalf("received %q, want 0 to %d in order", got, n-1)
			}
		}
		if len(got) != n {
			t.Errorf("received %d messages, want %d", len(got), n)
		}
		if a, _, _ := s.seen(); a != 2 {
			t.Errorf("%d attempts, want 2", a)
		}
	})
}
