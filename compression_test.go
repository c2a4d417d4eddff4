package leangrpc_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// countingListener counts the bytes its connections read and write, to
// see from the server's side whether messages crossed compressed.
type countingListener struct {
	net.Listener
	read, written atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.l.written.Add(int64(n))
	return n, err
}

// compressService answers UnaryCall and FullDuplexCall with payloads of
// zeros of the asked size. A request's "x-send-compressor" metadata makes
// the handler call SetSendCompressor with it first; "x-bomb" makes the
// response body bombMarker. Every handler checks that the client
// advertised gzip.
type compressService struct {
	testgrpc.UnimplementedTestServiceServer
}

// bombMarker in a message makes bombCompressor send its bomb instead.
var bombMarker = []byte("leangrpc-test-bomb-marker")

func prepareCompression(ctx context.Context) error {
	names, err := leangrpc.ClientSupportedCompressors(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(names, grpcgzip.Name) {
		return status.Errorf(codes.FailedPrecondition, "client supports %q, no gzip", names)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-send-compressor"); len(v) > 0 {
		if err := leangrpc.SetSendCompressor(ctx, v[0]); err != nil {
			return status.Errorf(codes.FailedPrecondition, "SetSendCompressor: %v", err)
		}
	}
	return nil
}

func (compressService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := prepareCompression(ctx); err != nil {
		return nil, err
	}
	body := make([]byte, req.ResponseSize)
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-bomb")) > 0 {
		body = bombMarker
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: body}}, nil
}

func (compressService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	if err := prepareCompression(stream.Context()); err != nil {
		return err
	}
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		size := req.GetResponseParameters()[0].GetSize()
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, size)}}); err != nil {
			return err
		}
	}
}

// compressServer starts a server of either stack serving compressService,
// counting its bytes. grpcOpts apply to grpc-go's server only.
func compressServer(t *testing.T, lean bool, grpcOpts ...grpc.ServerOption) (*countingListener, func()) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &countingListener{Listener: inner}
	done := make(chan struct{})
	if lean {
		s := leangrpc.NewServer()
		testgrpc.RegisterTestServiceServer(s, compressService{})
		go func() { defer close(done); s.Serve(lis) }()
		return lis, func() { s.Stop(); <-done }
	}
	s := grpc.NewServer(grpcOpts...)
	testgrpc.RegisterTestServiceServer(s, compressService{})
	go func() { defer close(done); s.Serve(lis) }()
	return lis, func() { s.Stop(); <-done }
}

// compressClient connects a client of either stack with default call
// options (leangrpc.WithDefaultCallOptions or grpc's); grpcOpts apply to
// grpc-go's client only.
func compressClient(t *testing.T, lean bool, addr string, defaults []grpc.CallOption, grpcOpts ...grpc.DialOption) (testgrpc.TestServiceClient, func()) {
	t.Helper()
	if lean {
		cc, err := leangrpc.NewClient(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithDefaultCallOptions(defaults...))
		if err != nil {
			t.Fatal(err)
		}
		return testgrpc.NewTestServiceClient(cc), func() { cc.Close() }
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(defaults...)}, grpcOpts...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testgrpc.NewTestServiceClient(cc), func() { cc.Close() }
}

const (
	zeros      = 256 << 10 // a payload of zeros: ~256 B gzipped
	compressed = 64 << 10  // what the server counts for compressed traffic at most
)

// wireBytes waits until the counter has reached at least want (when want
// is not 0) and returns the bytes it counted since before: the write that
// carries a response may be counted just after the client got it.
func wireBytes(c *atomic.Int64, before, want int64) int64 {
	deadline := time.Now().Add(2 * time.Second)
	for want > 0 && c.Load()-before < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return c.Load() - before
}

// direction is what a case expects of the bytes in one direction.
type direction bool

const (
	compressedWay   direction = true
	uncompressedWay direction = false
)

func checkWay(t *testing.T, what string, c *atomic.Int64, before int64, want direction) {
	t.Helper()
	if want == compressedWay {
		if n := wireBytes(c, before, 0); n > compressed {
			t.Errorf("%s: %d bytes on the wire, want the payload compressed (at most %d)", what, n, compressed)
		}
		return
	}
	if n := wireBytes(c, before, zeros); n < zeros {
		t.Errorf("%s: %d bytes on the wire, want the payload as it is (at least %d)", what, n, zeros)
	}
}

// TestCompressionUnary: gzip requests and responses, the response
// compressor following the request's or chosen by SetSendCompressor, in
// all four pairings.
func TestCompressionUnary(t *testing.T) {
	forAllPairs(t, func(t *testing.T, p pair) {
		for _, tc := range []struct {
			name       string
			defaults   []grpc.CallOption // the client's default call options
			opts       []grpc.CallOption // the call's
			send       string            // x-send-compressor
			req, reply direction
		}{
			{"UseCompressor as a default call option", []grpc.CallOption{grpc.UseCompressor(grpcgzip.Name)}, nil, "", compressedWay, compressedWay},
			{"UseCompressor", nil, []grpc.CallOption{grpc.UseCompressor(grpcgzip.Name)}, "", compressedWay, compressedWay},
			{"SetSendCompressor gzip", nil, nil, grpcgzip.Name, uncompressedWay, compressedWay},
			{"SetSendCompressor identity", nil, []grpc.CallOption{grpc.UseCompressor(grpcgzip.Name)}, encoding.Identity, compressedWay, uncompressedWay},
			{"UseCompressor identity", nil, []grpc.CallOption{grpc.UseCompressor(encoding.Identity)}, "", uncompressedWay, uncompressedWay},
			{"none", nil, nil, "", uncompressedWay, uncompressedWay},
		} {
			t.Run(tc.name, func(t *testing.T) {
				lis, stop := compressServer(t, p.leanServer)
				defer stop()
				tc2, closeClient := compressClient(t, p.leanClient, lis.Addr().String(), tc.defaults)
				defer closeClient()
				ctx := ctxT(t)
				if tc.send != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "x-send-compressor", tc.send)
				}
				for i := range 3 { // the first call and calls on a warm connection
					r0, w0 := lis.read.Load(), lis.written.Load()
					reply, err := tc2.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: zeros, Payload: &testpb.Payload{Body: make([]byte, zeros)}}, tc.opts...)
					if err != nil {
						t.Fatalf("call %d: %v", i, err)
					}
					if n := len(reply.GetPayload().GetBody()); n != zeros {
						t.Fatalf("call %d: %d bytes back, want %d", i, n, zeros)
					}
					checkWay(t, "request", &lis.read, r0, tc.req)
					checkWay(t, "response", &lis.written, w0, tc.reply)
				}
			})
		}
	})
}

// TestCompressionStreaming: a bidi stream with gzip both ways, with the
// server's messages left uncompressed by SetSendCompressor, and with only
// them compressed by it.
func TestCompressionStreaming(t *testing.T) {
	forAllPairs(t, func(t *testing.T, p pair) {
		gz := []grpc.CallOption{grpc.UseCompressor(grpcgzip.Name)}
		for _, tc := range []struct {
			name       string
			opts       []grpc.CallOption
			send       string
			req, reply direction
		}{
			{"gzip both ways", gz, "", compressedWay, compressedWay},
			{"SetSendCompressor identity", gz, encoding.Identity, compressedWay, uncompressedWay},
			{"SetSendCompressor gzip", nil, grpcgzip.Name, uncompressedWay, compressedWay},
		} {
			t.Run(tc.name, func(t *testing.T) {
				lis, stop := compressServer(t, p.leanServer)
				defer stop()
				client, closeClient := compressClient(t, p.leanClient, lis.Addr().String(), nil)
				defer closeClient()
				ctx := ctxT(t)
				if tc.send != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "x-send-compressor", tc.send)
				}
				r0, w0 := lis.read.Load(), lis.written.Load()
				stream, err := client.FullDuplexCall(ctx, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				const n = 4
				for i := range n {
					req := &testpb.StreamingOutputCallRequest{
						ResponseParameters: []*testpb.ResponseParameters{{Size: zeros / n}},
						Payload:            &testpb.Payload{Body: make([]byte, zeros/n)},
					}
					if err := stream.Send(req); err != nil {
						t.Fatalf("send %d: %v", i, err)
					}
					reply, err := stream.Recv()
					if err != nil {
						t.Fatalf("recv %d: %v", i, err)
					}
					if len(reply.GetPayload().GetBody()) != zeros/n {
						t.Fatalf("recv %d: %d bytes", i, len(reply.GetPayload().GetBody()))
					}
				}
				stream.CloseSend()
				if _, err := stream.Recv(); err != io.EOF {
					t.Fatalf("end: %v", err)
				}
				checkWay(t, "requests", &lis.read, r0, tc.req)
				checkWay(t, "responses", &lis.written, w0, tc.reply)
			})
		}
	})
}

// TestSetSendCompressorRefused: a compressor that is not registered, and
// a call after the headers went out, are refused on both servers.
func TestSetSendCompressorRefused(t *testing.T) {
	for _, lean := range []bool{true, false} {
		errs := make(chan error, 2)
		svc := setSendService{errs: errs}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var stop func()
		if lean {
			s := leangrpc.NewServer()
			testgrpc.RegisterTestServiceServer(s, svc)
			go s.Serve(lis)
			stop = s.Stop
		} else {
			s := grpc.NewServer()
			testgrpc.RegisterTestServiceServer(s, svc)
			go s.Serve(lis)
			stop = s.Stop
		}
		client, closeClient := compressClient(t, true, lis.Addr().String(), nil)
		if _, err := client.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
			t.Errorf("lean server %v: %v", lean, err)
		}
		closeClient()
		stop()
		if err := <-errs; err == nil || err.Error() != `unable to set send compressor: compressor not registered "leangrpc-test-none"` {
			t.Errorf("lean server %v: unregistered: %v", lean, err)
		}
		if err := <-errs; err == nil {
			t.Errorf("lean server %v: after SendHeader: no error", lean)
		}
	}
}

type setSendService struct {
	testgrpc.UnimplementedTestServiceServer
	errs chan error
}

func (s setSendService) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.errs <- leangrpc.SetSendCompressor(ctx, "leangrpc-test-none")
	grpc.SendHeader(ctx, nil)
	s.errs <- leangrpc.SetSendCompressor(ctx, grpcgzip.Name)
	return &testpb.Empty{}, nil
}

// legacyCompressor is a grpc.Compressor/Decompressor (grpc-go's old API)
// that is not in the registry: grpc-go's clients and servers given it
// with WithCompressor or RPCCompressor send an encoding the other side
// does not know.
type legacyCompressor struct{}

const unregistered = "leangrpc-test-unregistered"

func (legacyCompressor) Type() string { return unregistered }
func (legacyCompressor) Do(w io.Writer, p []byte) error {
	z := gzip.NewWriter(w)
	if _, err := z.Write(p); err != nil {
		return err
	}
	return z.Close()
}

// TestUnknownEncoding: the answers to encodings nobody registered, each
// case run against both stacks and compared with grpc-go's.
func TestUnknownEncoding(t *testing.T) {
	sockio.StartIdlePoller()
	call := func(t *testing.T, leanServer, leanClient bool, serverOpts []grpc.ServerOption, clientOpts []grpc.DialOption, callOpts ...grpc.CallOption) error {
		lis, stop := compressServer(t, leanServer, serverOpts...)
		defer stop()
		client, closeClient := compressClient(t, leanClient, lis.Addr().String(), nil, clientOpts...)
		defer closeClient()
		_, err := client.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 100, Payload: &testpb.Payload{Body: make([]byte, 100)}}, callOpts...)
		return err
	}
	same := func(t *testing.T, lean, ref error, code codes.Code) {
		t.Helper()
		if status.Code(ref) != code {
			t.Fatalf("grpc-go: %v, want %v", ref, code)
		}
		if status.Code(lean) != status.Code(ref) || status.Convert(lean).Message() != status.Convert(ref).Message() {
			t.Errorf("leangrpc: %v\ngrpc-go:  %v", lean, ref)
		}
	}
	t.Run("request encoding unknown to the server", func(t *testing.T) {
		// grpc-go's client sends the legacy compressor's name.
		opts := []grpc.DialOption{grpc.WithCompressor(legacyCompressor{})} //nolint:staticcheck // the old API sends an unregistered name
		lean := call(t, true, false, nil, opts)
		ref := call(t, false, false, nil, opts)
		same(t, lean, ref, codes.Unimplemented)
	})
	t.Run("response encoding unknown to the client", func(t *testing.T) {
		// grpc-go's server compresses every response with it.
		opts := []grpc.ServerOption{grpc.RPCCompressor(legacyCompressor{})} //nolint:staticcheck // as above
		lean := call(t, false, true, opts, nil)
		ref := call(t, false, false, opts, nil)
		same(t, lean, ref, codes.Internal)
	})
	t.Run("UseCompressor of an unregistered name", func(t *testing.T) {
		lean := call(t, true, true, nil, nil, grpc.UseCompressor(unregistered))
		ref := call(t, false, false, nil, nil, grpc.UseCompressor(unregistered))
		same(t, lean, ref, codes.Internal)
	})
}

// scriptedPeer connects a scripted HTTP/2 client to a server of either
// stack serving compressService.
func scriptedPeer(t *testing.T, lean bool) *h2test.Peer {
	t.Helper()
	lis, stop := compressServer(t, lean)
	t.Cleanup(stop)
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := h2test.NewPeer(t, c, h2test.ClientRole)
	p.Greet()
	p.Ignore[h2frame.TypeData] = true // the tests look at the status alone
	return p
}

// TestWireCompressedFlag: what a server answers to a message flagged
// compressed on a stream without an encoding, and to an unknown
// grpc-encoding, on the wire, compared with grpc-go's server.
func TestWireCompressedFlag(t *testing.T) {
	answer := func(lean bool, extra []string, msg []byte) (string, string) {
		p := scriptedPeer(t, lean)
		p.WriteHeaders(1, false, request("/grpc.testing.TestService/UnaryCall", extra...)...)
		p.WriteData(1, true, msg)
		for {
			h := p.WantHeaders(1)
			if h.EndStream {
				return h.Get("grpc-status"), h.Get("grpc-message")
			}
		}
	}
	for _, tc := range []struct {
		name   string
		extra  []string
		msg    []byte
		status string
	}{
		{"compressed flag without grpc-encoding", nil, grpcFrame(1, []byte{1, 2, 3}), "13"},
		{"compressed flag with identity", []string{"grpc-encoding", "identity"}, grpcFrame(1, []byte{1, 2, 3}), "13"},
		{"unknown grpc-encoding", []string{"grpc-encoding", "x"}, grpcFrame(0, nil), "12"},
		{"gzip flag not set", []string{"grpc-encoding", "gzip", "grpc-accept-encoding", "gzip"}, grpcFrame(0, nil), "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := answer(true, tc.extra, tc.msg)
			refCode, refMsg := answer(false, tc.extra, tc.msg)
			if refCode != tc.status {
				t.Fatalf("grpc-go: %s %q, want status %s", refCode, refMsg, tc.status)
			}
			if code != refCode || msg != refMsg {
				t.Errorf("leangrpc: %s %q; grpc-go: %s %q", code, msg, refCode, refMsg)
			}
		})
	}
}

// bombCompressor is gzip, except that a message holding bombMarker is
// replaced by bomb: ~1 MiB that inflates to 1 GiB. Its decompressors
// count what they inflated; bombInflated is the most one inflated.
type bombCompressor struct{}

const bombName = "leangrpc-test-bomb"

var (
	bomb         []byte
	bombInflated atomic.Int64
)

func init() {
	var member bytes.Buffer
	z := gzip.NewWriter(&member)
	z.Write(make([]byte, 1<<20))
	z.Close()
	bomb = bytes.Repeat(member.Bytes(), 1024)
	encoding.RegisterCompressor(bombCompressor{})
}

func (bombCompressor) Name() string { return bombName }

func (bombCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return &bombWriter{w: w}, nil
}

type bombWriter struct {
	w   io.Writer
	buf bytes.Buffer
}

func (b *bombWriter) Write(p []byte) (int, error) { return b.buf.Write(p) }

func (b *bombWriter) Close() error {
	if bytes.Contains(b.buf.Bytes(), bombMarker) {
		_, err := b.w.Write(bomb)
		return err
	}
	z := gzip.NewWriter(b.w)
	z.Write(b.buf.Bytes())
	return z.Close()
}

func (bombCompressor) Decompress(r io.Reader) (io.Reader, error) {
	z, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	return &bombCounter{r: z}, nil
}

type bombCounter struct {
	r io.Reader
	n atomic.Int64
}

func (c *bombCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	total := c.n.Add(int64(n))
	for {
		most := bombInflated.Load()
		if total <= most || bombInflated.CompareAndSwap(most, total) {
			return n, err
		}
	}
}

// TestInflateBomb: a leangrpc server given a bomb by grpc-go's client and
// a leangrpc client given one by grpc-go's server refuse it with grpc-go's
// answer, after inflating at most the receive limit plus one byte and
// without allocating anything like the inflated size.
func TestInflateBomb(t *testing.T) {
	sockio.StartIdlePoller()
	const limit = 4 << 20 // the default receive limit
	call := func(t *testing.T, leanServer, leanClient, bombRequest bool) (error, int64, uint64) {
		lis, stop := compressServer(t, leanServer)
		defer stop()
		client, closeClient := compressClient(t, leanClient, lis.Addr().String(), nil)
		defer closeClient()
		ctx := ctxT(t)
		body := make([]byte, 10)
		if bombRequest {
			body = bombMarker
		} else {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-bomb", "1")
		}
		// A first call warms the connection up, so that what the
		// measured call allocates is its own.
		if _, err := client.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.Unimplemented {
			t.Fatalf("warm-up: %v", err)
		}
		bombInflated.Store(0)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}}, grpc.UseCompressor(bombName))
		runtime.ReadMemStats(&after)
		return err, bombInflated.Load(), after.TotalAlloc - before.TotalAlloc
	}
	for _, tc := range []struct {
		name        string
		bombRequest bool // the bomb is the request (else the response)
		leanServer  bool
		leanClient  bool
	}{
		{"leangrpc server, grpc-go client", true, true, false},
		{"leangrpc client, grpc-go server", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			err, inflated, alloc := call(t, tc.leanServer, tc.leanClient, tc.bombRequest)
			ref, _, refAlloc := call(t, false, false, tc.bombRequest)
			if status.Code(ref) != codes.ResourceExhausted {
				t.Fatalf("grpc-go: %v, want ResourceExhausted", ref)
			}
			if status.Code(err) != status.Code(ref) || status.Convert(err).Message() != status.Convert(ref).Message() {
				t.Errorf("leangrpc: %v\ngrpc-go:  %v", err, ref)
			}
			if inflated > limit+1 {
				t.Errorf("inflated %d bytes, want at most %d", inflated, limit+1)
			}
			// Sending the bomb (1 MiB) and reading up to the limit cost a
			// few MiB; inflating it would cost 1 GiB.
			if alloc > 64<<20 {
				t.Errorf("allocated %d MiB for a bomb of 1 GiB (grpc-go: %d MiB)", alloc>>20, refAlloc>>20)
			}
			t.Logf("allocated %.1f MiB (grpc-go pair %.1f MiB), inflated %d bytes", float64(alloc)/(1<<20), float64(refAlloc)/(1<<20), inflated)
			checkGoroutines(t, base)
		})
	}
}
