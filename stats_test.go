package leangrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// statsRecorder is a stats.Handler that logs each call's and each
// connection's events in order, with the fields that do not depend on the
// run (no times, ports or header sizes: those only as "set or not").
type statsRecorder struct {
	mu    sync.Mutex
	rpcs  [][]string // by the order of TagRPC
	conns [][]string // by the order of TagConn
}

type rpcIDKey struct{}
type connIDKey struct{}

func (r *statsRecorder) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	// What otelgrpc needs on the server: the request's metadata and the
	// peer already in the context it tags.
	md, _ := metadata.FromIncomingContext(ctx)
	_, hasPeer := peer.FromContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	id := len(r.rpcs)
	r.rpcs = append(r.rpcs, []string{fmt.Sprintf("TagRPC method=%s failfast=%v scenario=%v peer=%v resolutiondelay=%v",
		info.FullMethodName, info.FailFast, md.Get("scenario"), hasPeer, info.NameResolutionDelay)})
	return context.WithValue(ctx, rpcIDKey{}, id)
}

func (r *statsRecorder) HandleRPC(ctx context.Context, s stats.RPCStats) {
	id, ok := ctx.Value(rpcIDKey{}).(int)
	line := describeRPCStats(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		r.rpcs = append(r.rpcs, []string{"untagged " + line})
		return
	}
	r.rpcs[id] = append(r.rpcs[id], line)
}

func (r *statsRecorder) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := len(r.conns)
	r.conns = append(r.conns, []string{fmt.Sprintf("TagConn addrs=%v/%v", info.RemoteAddr != nil, info.LocalAddr != nil)})
	return context.WithValue(ctx, connIDKey{}, id)
}

func (r *statsRecorder) HandleConn(ctx context.Context, s stats.ConnStats) {
	id, ok := ctx.Value(connIDKey{}).(int)
	var line string
	switch s := s.(type) {
	case *stats.ConnBegin:
		line = fmt.Sprintf("ConnBegin client=%v", s.Client)
	case *stats.ConnEnd:
		line = fmt.Sprintf("ConnEnd client=%v", s.Client)
	default:
		line = fmt.Sprintf("%T", s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		r.conns = append(r.conns, []string{"untagged " + line})
		return
	}
	r.conns[id] = append(r.conns[id], line)
}

// snapshot returns copies of the logs.
func (r *statsRecorder) snapshot() (rpcs, conns [][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.rpcs {
		rpcs = append(rpcs, slices.Clone(l))
	}
	for _, l := range r.conns {
		conns = append(conns, slices.Clone(l))
	}
	return rpcs, conns
}

// mdString prints md sorted, with the values that differ from run to run
// or between the implementations' user agents masked.
func mdString(md metadata.MD) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v := md[k]
		if k == "user-agent" || k == ":authority" {
			v = []string{"*"}
		}
		fmt.Fprintf(&b, "%s=%v;", k, v)
	}
	return "{" + b.String() + "}"
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	st, ok := status.FromError(err)
	if !ok {
		return "non-status " + err.Error()
	}
	return st.Code().String() + ":" + st.Message()
}

func describeRPCStats(s stats.RPCStats) string {
	switch s := s.(type) {
	case *stats.Begin:
		return fmt.Sprintf("Begin client=%v failfast=%v cs=%v ss=%v retry=%v time=%v",
			s.Client, s.FailFast, s.IsClientStream, s.IsServerStream, s.IsTransparentRetryAttempt, !s.BeginTime.IsZero())
	case *stats.InHeader:
		// The wire lengths differ with each stack's HPACK encoding; both
		// must report one.
		return fmt.Sprintf("InHeader client=%v method=%s comp=%q addrs=%v/%v wire=%v hdr=%s",
			s.Client, s.FullMethod, s.Compression, s.RemoteAddr != nil, s.LocalAddr != nil, s.WireLength > 0, mdString(s.Header))
	case *stats.OutHeader:
		return fmt.Sprintf("OutHeader client=%v method=%s comp=%q addrs=%v/%v authority=%v hdr=%s",
			s.Client, s.FullMethod, s.Compression, s.RemoteAddr != nil, s.LocalAddr != nil, s.Authority != "", mdString(s.Header))
	case *stats.InPayload:
		return fmt.Sprintf("InPayload client=%v len=%d comp=%d wire=%d payload=%T time=%v",
			s.Client, s.Length, s.CompressedLength, s.WireLength, s.Payload, !s.RecvTime.IsZero())
	case *stats.OutPayload:
		return fmt.Sprintf("OutPayload client=%v len=%d comp=%d wire=%d payload=%T time=%v",
			s.Client, s.Length, s.CompressedLength, s.WireLength, s.Payload, !s.SentTime.IsZero())
	case *stats.InTrailer:
		return fmt.Sprintf("InTrailer client=%v wire=%v trailer=%s", s.Client, s.WireLength > 0, mdString(s.Trailer))
	case *stats.OutTrailer:
		return fmt.Sprintf("OutTrailer client=%v trailer=%s", s.Client, mdString(s.Trailer))
	case *stats.End:
		return fmt.Sprintf("End client=%v err=%s trailer=%s times=%v",
			s.Client, errString(s.Error), mdString(s.Trailer), !s.BeginTime.IsZero() && !s.EndTime.Before(s.BeginTime))
	case *stats.DelayedPickComplete:
		return "DelayedPickComplete"
	}
	return fmt.Sprintf("%T", s)
}

// statsService runs the calls of the comparison; the "scenario" metadata
// says what to do.
type statsService struct {
	testgrpc.UnimplementedTestServiceServer
}

func scenarioOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("scenario"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (statsService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	grpc.SetHeader(ctx, metadata.Pairs("hk", "hv"))
	grpc.SetTrailer(ctx, metadata.Pairs("tk", "tv"))
	switch scenarioOf(ctx) {
	case "unary-error":
		return nil, status.Error(codes.NotFound, "no such thing")
	case "deadline":
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &testpb.SimpleResponse{Payload: req.Payload}, nil
}

func (statsService) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	n := 0
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(n)})
		}
		if err != nil {
			return err
		}
		n += len(req.GetPayload().GetBody())
	}
}

func (statsService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	stream.SetTrailer(metadata.Pairs("tk", "tv"))
	for _, p := range req.ResponseParameters {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: payload(int(p.Size))}); err != nil {
			return err
		}
	}
	return nil
}

func (statsService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.Payload}); err != nil {
			return err
		}
	}
}

// statsScenario is one call of the comparison, made through the client tc.
type statsScenario struct {
	name string
	// ctxEnded: the call ends with its context (the deadline). Which of
	// the two the server's handler sees end its context depends on a race
	// in both implementations: its own deadline timer, or the client's
	// RST_STREAM (Canceled) when the client's deadline fires first.
	ctxEnded bool
	// serverLast is the server's last event when it is not End: grpc-go
	// reports no Begin and no End for a method it does not know.
	serverLast string
	// sendRace: the server answers without reading the request, so
	// grpc-go's client may find the stream ended when it sends; it then
	// reports no OutPayload and, its send's io.EOF taken for success, an
	// End without error. Its client events are compared only when its
	// send won.
	sendRace bool
	run      func(ctx context.Context, cc grpc.ClientConnInterface, tc testgrpc.TestServiceClient) error
}

func withScenario(ctx context.Context, name string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "scenario", name, "ck", "cv")
}

var statsScenarios = []statsScenario{
	{name: "unary-ok", run: func(ctx context.Context, _ grpc.ClientConnInterface, tc testgrpc.TestServiceClient) error {
		_, err := tc.UnaryCall(withScenario(ctx, "unary-ok"), &testpb.SimpleRequest{Payload: payload(10)})
		return err
	}},
	// Compressed both ways (the server answers in the request's
	// encoding): the payload events carry the compressed lengths.
	{name: "unary-gzip", run: func(ctx context.Context, _ grpc.ClientConnInterface, tc testgrpc.TestServiceClient) error {
		_, err := tc.UnaryCall(withScenario(ctx, "unary-gzip"), &testpb.SimpleRequest{Payload: payload(1000)}, grpc.UseCompressor(grpcgzip.Name))
		return err
	}},
	{name: "unary-error", run: func(ctx context.Context, _ grpc.ClientConnInterface, tc testgrpc.TestServiceClient) error {
		_, err := tc.UnaryCall(withScenario(ctx, "unary-error"), &testpb.SimpleRequest{Payload: payload(3)})
		if status.Code(err) != codes.NotFound {
			return fmt.Errorf("got %v, want NotFound", err)
		}
		return nil
	}},
	{name: "client-streaming", run: func(ctx context.Context, _ grpc.ClientConnInterface, tc testgrpc.TestServiceClient) error {
		s, err := tc.StreamingInputCall(withScenario(ctx, "client-streaming"))
		if err != nil {
			return err
		}
		for _, n := range []int{1, 20, 300} {
			if err := s.Send(&testpb.StreamingInputCallRequest{Payload: payload(n)}); err != nil {
				return err
			}
		}
		_, err = s.CloseAndRecv()
		return err
	}},
	{name: "server-streaming", run: func(ctx context.Context, _ grpc.ClientConnInterface, tc testgrpc.TestServiceClient) error {
		s, err := tc.StreamingOutputCall(withScenario(ctx, "server-streaming"), &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: 5}, {Size: 50}, {Size: 500}},
		})
		if err != nil {
			return err
		}
		for {
			if _, err := s.Recv(); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}},
	{name: "bidi", run: func(ctx context.Context, _ grpc.ClientConnInterface, tc testgrpc.TestServiceClient) error {
		s, err := tc.FullDuplexCall(withScenario(ctx, "bidi"))
		if err != nil {
			return err
		}
		for _, n := range []int{7, 70} {
			if err := s.Send(&testpb.StreamingOutputCallRequest{Payload: payload(n)}); err != nil {
				return err
			}
			if _, err := s.Recv(); err != nil {
				return err
			}
		}
		s.CloseSend()
		if _, err := s.Recv(); err != io.EOF {
			return fmt.Errorf("got %v, want io.EOF", err)
		}
		return nil
	}},
	{name: "cancel", run: func(ctx context.Context, _ grpc.ClientConnInterface, tc testgrpc.TestServiceClient) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s, err := tc.FullDuplexCall(withScenario(ctx, "cancel"))
		if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallRequest{Payload: payload(4)}); err != nil {
			return err
		}
		if _, err := s.Recv(); err != nil {
			return err
		}
		cancel()
		if _, err := s.Recv(); status.Code(err) != codes.Canceled {
			return fmt.Errorf("got %v, want Canceled", err)
		}
		return nil
	}},
	{name: "unknown-method", serverLast: "OutTrailer ", sendRace: true, run: func(ctx context.Context, cc grpc.ClientConnInterface, _ testgrpc.TestServiceClient) error {
		err := cc.Invoke(withScenario(ctx, "unknown-method"), "/grpc.testing.TestService/NoSuchMethod", &testpb.Empty{}, &testpb.Empty{})
		if status.Code(err) != codes.Unimplemented {
			return fmt.Errorf("got %v, want Unimplemented", err)
		}
		return nil
	}},
	{name: "deadline", ctxEnded: true, run: func(ctx context.Context, _ grpc.ClientConnInterface, tc testgrpc.TestServiceClient) error {
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := tc.UnaryCall(withScenario(ctx, "deadline"), &testpb.SimpleRequest{Payload: payload(2)})
		if status.Code(err) != codes.DeadlineExceeded {
			return fmt.Errorf("got %v, want DeadlineExceeded", err)
		}
		return nil
	}},
}

// statsRun is what the recorders of one pairing logged.
type statsRun struct {
	serverRPCs, clientRPCs   [][]string
	serverConns, clientConns [][]string
}

// ended reports whether every call in rpcs logged its last event: End,
// or on the server the scenario's serverLast.
func ended(rpcs [][]string, n int, server bool) bool {
	if len(rpcs) != n {
		return false
	}
	for i, l := range rpcs {
		last := "End "
		if server && statsScenarios[i].serverLast != "" {
			last = statsScenarios[i].serverLast
		}
		if !strings.HasPrefix(l[len(l)-1], last) {
			return false
		}
	}
	return true
}

// connsEnded reports whether n connections were logged and all ended.
func connsEnded(conns [][]string, n int) bool {
	if len(conns) != n {
		return false
	}
	for _, l := range conns {
		if !strings.HasPrefix(l[len(l)-1], "ConnEnd") {
			return false
		}
	}
	return true
}

// runStatsPairing runs the scenarios through one server and one client,
// each with a recorder (two for the server, to check that several
// handlers see the same events), and returns the logs once every call and
// connection has ended.
func runStatsPairing(t *testing.T, leanServer, leanClient bool) statsRun {
	t.Helper()
	srvRec, srvRec2, cliRec := &statsRecorder{}, &statsRecorder{}, &statsRecorder{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var stopServer func()
	done := make(chan struct{})
	if leanServer {
		s := leangrpc.NewServer(leangrpc.StatsHandler(srvRec), leangrpc.StatsHandler(srvRec2), leangrpc.StatsHandler(nil))
		testgrpc.RegisterTestServiceServer(s, statsService{})
		go func() { defer close(done); s.Serve(lis) }()
		stopServer = s.Stop
	} else {
		s := grpc.NewServer(grpc.StatsHandler(srvRec), grpc.StatsHandler(srvRec2))
		testgrpc.RegisterTestServiceServer(s, statsService{})
		go func() { defer close(done); s.Serve(lis) }()
		stopServer = s.Stop
	}
	var cc grpc.ClientConnInterface
	var closeClient func()
	if leanClient {
		c, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithStatsHandler(cliRec))
		if err != nil {
			t.Fatal(err)
		}
		cc, closeClient = c, func() { c.Close() }
	} else {
		c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(cliRec))
		if err != nil {
			t.Fatal(err)
		}
		cc, closeClient = c, func() { c.Close() }
	}
	tc := testgrpc.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, sc := range statsScenarios {
		if err := sc.run(ctx, cc, tc); err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
		// The server may log its End after the client has its answer:
		// wait for it, so that the next call is the next one logged.
		waitFor(t, sc.name+": the server's End", func() bool {
			rpcs, _ := srvRec.snapshot()
			return ended(rpcs, i+1, true)
		})
		waitFor(t, sc.name+": the client's End", func() bool {
			rpcs, _ := cliRec.snapshot()
			return ended(rpcs, i+1, false)
		})
	}
	closeClient()
	waitFor(t, "the connections' ends", func() bool {
		_, sc := srvRec.snapshot()
		_, cc := cliRec.snapshot()
		return connsEnded(sc, 1) && connsEnded(cc, 1)
	})
	stopServer()
	<-done

	var r statsRun
	r.serverRPCs, r.serverConns = srvRec.snapshot()
	r.clientRPCs, r.clientConns = cliRec.snapshot()
	rpcs2, conns2 := srvRec2.snapshot()
	if !slices.EqualFunc(rpcs2, r.serverRPCs, slices.Equal) || !slices.EqualFunc(conns2, r.serverConns, slices.Equal) {
		t.Errorf("the second server handler saw other events:\n%s\nfirst:\n%s", strings.Join(flatten(rpcs2), "\n"), strings.Join(flatten(r.serverRPCs), "\n"))
	}
	return r
}

func flatten(rpcs [][]string) []string {
	var out []string
	for i, l := range rpcs {
		out = append(out, fmt.Sprintf("-- call %d", i))
		out = append(out, l...)
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// normalizeServer makes the server's events of a call that ended with its
// context independent of the races that decide them in grpc-go: which
// end's timer won (the error, see statsScenario), and whether the handler,
// returning as its context ends, wrote the status before the transport's
// own deadline timer closed the stream (OutHeader and OutTrailer, there or
// not). leangrpc resets the stream when the deadline passes, before the
// handler can write, so it reports neither.
func normalizeServer(rpcs [][]string) [][]string {
	for i, sc := range statsScenarios {
		if !sc.ctxEnded || i >= len(rpcs) {
			continue
		}
		rpcs[i] = slices.DeleteFunc(rpcs[i], func(line string) bool {
			return strings.HasPrefix(line, "OutHeader ") || strings.HasPrefix(line, "OutTrailer ")
		})
		for j, line := range rpcs[i] {
			line = strings.Replace(line, "err=Canceled:context canceled", "err=<context ended>", 1)
			rpcs[i][j] = strings.Replace(line, "err=DeadlineExceeded:context deadline exceeded", "err=<context ended>", 1)
		}
	}
	return rpcs
}

// normalizeClient keeps, of a call that ended with its context, what does
// not depend on races: grpc-go's client error message depends on whether
// its deadline watcher or the RST_STREAM it sent ended the stream first
// ("context deadline exceeded" or "stream terminated by RST_STREAM with
// error code: CANCEL"), and a grpc-go server may get its status out
// before its deadline timer closes the stream (see normalizeServer), so
// the response's headers and trailers may arrive or not.
func normalizeClient(i int, l []string) []string {
	if !statsScenarios[i].ctxEnded {
		return l
	}
	out := slices.DeleteFunc(slices.Clone(l), func(line string) bool {
		return strings.HasPrefix(line, "InHeader ") || strings.HasPrefix(line, "InTrailer ")
	})
	for j, line := range out {
		if rest, ok := strings.CutPrefix(line, "End "); ok {
			if a, b, ok := strings.Cut(rest, "err="); ok {
				code, tail, _ := strings.Cut(b, ":")
				_, tail, _ = strings.Cut(tail, " times=")
				out[j] = "End " + a + "err=" + code + " times=" + tail
			}
		}
	}
	return out
}

// withoutDelayedPick drops DelayedPickComplete. grpc-go reports it when the
// call's pick was queued, for the first call on a new ClientConn most of
// the time but not always: whether the connection is ready by the time of
// the pick is a race. leangrpc reports it when the call waited for a
// connection to be dialed; checkDelayedPick checks that on its own.
func withoutDelayedPick(l []string) []string {
	return slices.DeleteFunc(slices.Clone(l), func(line string) bool { return line == "DelayedPickComplete" })
}

// checkDelayedPick asserts that leangrpc's client reported
// DelayedPickComplete, right after Begin, for its first call (which dialed
// the connection) and for no other.
func checkDelayedPick(t *testing.T, rpcs [][]string) {
	t.Helper()
	for i, l := range rpcs {
		got := slices.Index(l, "DelayedPickComplete")
		want := -1
		if i == 0 {
			want = 2 // TagRPC, Begin, DelayedPickComplete
		}
		if got != want || slices.Contains(l[got+1:], "DelayedPickComplete") {
			t.Errorf("call %d: DelayedPickComplete at %d, want %d:\n  %s", i, got, want, strings.Join(l, "\n  "))
		}
	}
}

// splitClientReads separates a client call's InHeader and InTrailer from
// its other events. grpc-go reports those two from its connection's reader
// goroutine as the frames arrive, so where they fall among the events the
// caller's goroutine reports (an InPayload, an OutPayload) is a race in
// grpc-go; leangrpc, whose caller reads for itself, reports them when the
// caller takes the headers and the trailers in. What is deterministic is
// the order of the other events and the headers and trailers themselves.
func splitClientReads(l []string) (rest, reads []string) {
	for _, line := range l {
		if strings.HasPrefix(line, "InHeader ") || strings.HasPrefix(line, "InTrailer ") {
			reads = append(reads, line)
		} else {
			rest = append(rest, line)
		}
	}
	return rest, reads
}

// TestStatsHandlerEventsMatchGRPC runs the same calls through the four
// pairings of leangrpc and grpc-go servers and clients, each with
// recording stats handlers, and asserts that in each role leangrpc's
// events are grpc-go's: same events, order and fields.
func TestStatsHandlerEventsMatchGRPC(t *testing.T) {
	sockio.StartIdlePoller()
	base := runtime.NumGoroutine()
	bufs := bufpool.Default().Outstanding()
	runs := map[[2]bool]statsRun{}
	for _, leanServer := range []bool{false, true} {
		for _, leanClient := range []bool{false, true} {
			runs[[2]bool{leanServer, leanClient}] = runStatsPairing(t, leanServer, leanClient)
		}
	}
	name := map[bool]string{false: "grpc-go", true: "leangrpc"}

	// The server role: the same client against either server.
	for _, leanClient := range []bool{false, true} {
		want := runs[[2]bool{false, leanClient}]
		got := runs[[2]bool{true, leanClient}]
		normalizeServer(want.serverRPCs)
		normalizeServer(got.serverRPCs)
		for i, sc := range statsScenarios {
			if !slices.Equal(got.serverRPCs[i], want.serverRPCs[i]) {
				t.Errorf("server events of %s with a %s client:\nleangrpc:\n  %s\ngrpc-go:\n  %s", sc.name, name[leanClient],
					strings.Join(got.serverRPCs[i], "\n  "), strings.Join(want.serverRPCs[i], "\n  "))
			}
		}
		if !slices.EqualFunc(got.serverConns, want.serverConns, slices.Equal) {
			t.Errorf("server connection events with a %s client: leangrpc %q, grpc-go %q", name[leanClient], got.serverConns, want.serverConns)
		}
	}

	// The client role: either client against the same server.
	for _, leanServer := range []bool{false, true} {
		want := runs[[2]bool{leanServer, false}]
		got := runs[[2]bool{leanServer, true}]
		for i, sc := range statsScenarios {
			checkClientReadOrder(t, sc.name, got.clientRPCs[i])
			if sc.sendRace && !slices.ContainsFunc(want.clientRPCs[i], func(line string) bool { return strings.HasPrefix(line, "OutPayload ") }) {
				continue // see sendRace
			}
			gotRest, gotReads := splitClientReads(withoutDelayedPick(normalizeClient(i, got.clientRPCs[i])))
			wantRest, wantReads := splitClientReads(withoutDelayedPick(normalizeClient(i, want.clientRPCs[i])))
			if !slices.Equal(gotRest, wantRest) || !slices.Equal(gotReads, wantReads) {
				t.Errorf("client events of %s against a %s server:\nleangrpc:\n  %s\ngrpc-go:\n  %s", sc.name, name[leanServer],
					strings.Join(got.clientRPCs[i], "\n  "), strings.Join(want.clientRPCs[i], "\n  "))
			}
		}
		checkDelayedPick(t, got.clientRPCs)
		if !slices.EqualFunc(got.clientConns, want.clientConns, slices.Equal) {
			t.Errorf("client connection events against a %s server: leangrpc %q, grpc-go %q", name[leanServer], got.clientConns, want.clientConns)
		}
	}
	checkGoroutines(t, base)
	checkBuffers(t, bufs)
}

// checkClientReadOrder asserts where leangrpc's client reports the
// response's headers and trailers: the headers before the first message,
// the trailers after the last and before the End, or, for a response of
// one message, just before it.
func checkClientReadOrder(t *testing.T, name string, l []string) {
	t.Helper()
	pos := func(prefix string, last bool) int {
		at := -1
		for i, line := range l {
			if strings.HasPrefix(line, prefix) {
				at = i
				if !last {
					break
				}
			}
		}
		return at
	}
	hdr, firstIn := pos("InHeader ", false), pos("InPayload ", false)
	tr, lastIn, end := pos("InTrailer ", false), pos("InPayload ", true), pos("End ", false)
	if firstIn >= 0 && (hdr < 0 || hdr > firstIn) {
		t.Errorf("%s: leangrpc client's InHeader is not before its first InPayload:\n  %s", name, strings.Join(l, "\n  "))
	}
	// A response of one message is reported after its trailers (grpc-go's
	// usual order); a stream's trailers come after its last message.
	oneBefore := firstIn == lastIn && tr == lastIn-1 && tr > hdr
	if tr >= 0 && (tr < lastIn && !oneBefore || tr > end) {
		t.Errorf("%s: leangrpc client's InTrailer is neither between its last InPayload and End nor just before a sole InPayload:\n  %s", name, strings.Join(l, "\n  "))
	}
}

// TestStatsHandlerContext checks the contexts handlers and calls see: on
// the server, the handler's context is the one TagRPC returned (so a
// tracer's span reaches the application) and it derives from TagConn's;
// on the client, the request carries the metadata TagRPC put in the
// outgoing context (a tracer's traceparent).
func TestStatsHandlerContext(t *testing.T) {
	forPairs(t, func(t *testing.T, p pair) {
		tag := &ctxTagger{}
		addr, stop := startStatsEchoServer(t, p.leanServer, tag)
		defer stop()
		var cc grpc.ClientConnInterface
		if p.leanClient {
			c, err := leangrpc.NewClient(addr, leangrpc.WithStatsHandler(tag))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cc = c
		} else {
			c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(tag))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cc = c
		}
		tc := testgrpc.NewTestServiceClient(cc)
		var trailer metadata.MD
		_, err := tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
		if err != nil {
			t.Fatal(err)
		}
		// The server echoes what its handler's context held as trailers.
		want := metadata.MD{"rpc-tag": {"server"}, "conn-tag": {"server"}, "propagated": {"from-client-tagrpc"}}
		for k, v := range want {
			if got := trailer.Get(k); !slices.Equal(got, v) {
				t.Errorf("%s: got %q, want %q", k, got, v)
			}
		}
	})
}

type ctxTagKey struct{ name string }

// ctxTagger tags contexts: on the client it adds outgoing metadata, on the
// server it puts values the handler reads back.
type ctxTagger struct{}

func (ctxTagger) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if _, ok := metadata.FromIncomingContext(ctx); ok {
		return context.WithValue(ctx, ctxTagKey{"rpc"}, "server")
	}
	return metadata.AppendToOutgoingContext(ctx, "propagated", "from-client-tagrpc")
}
func (ctxTagger) HandleRPC(context.Context, stats.RPCStats) {}
func (ctxTagger) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, ctxTagKey{"conn"}, "server")
}
func (ctxTagger) HandleConn(context.Context, stats.ConnStats) {}

type ctxEchoService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (ctxEchoService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	tr := metadata.MD{"propagated": md.Get("propagated")}
	if v, ok := ctx.Value(ctxTagKey{"rpc"}).(string); ok {
		tr.Set("rpc-tag", v)
	}
	if v, ok := ctx.Value(ctxTagKey{"conn"}).(string); ok {
		tr.Set("conn-tag", v)
	}
	if err := grpc.SetTrailer(ctx, tr); err != nil {
		return nil, errors.New("no transport stream in the handler's context")
	}
	return &testpb.SimpleResponse{}, nil
}

func startStatsEchoServer(t *testing.T, lean bool, h stats.Handler) (string, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	if lean {
		s := leangrpc.NewServer(leangrpc.StatsHandler(h))
		testgrpc.RegisterTestServiceServer(s, ctxEchoService{})
		go func() { defer close(done); s.Serve(lis) }()
		return lis.Addr().String(), func() { s.Stop(); <-done }
	}
	s := grpc.NewServer(grpc.StatsHandler(h))
	testgrpc.RegisterTestServiceServer(s, ctxEchoService{})
	go func() { defer close(done); s.Serve(lis) }()
	return lis.Addr().String(), func() { s.Stop(); <-done }
}

// TestStatsHandlersRunInOrder installs two handlers on each end of a
// leangrpc call: each event reaches the first, then the second; the
// second's TagRPC and TagConn get the context the first returned, and the
// events see the context the last Tag call returned.
func TestStatsHandlersRunInOrder(t *testing.T) {
	sockio.StartIdlePoller()
	base := runtime.NumGoroutine()
	log := &orderLog{}
	first, second := &orderHandler{name: "first", log: log}, &orderHandler{name: "second", log: log}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer(leangrpc.StatsHandler(first), leangrpc.StatsHandler(second))
	testgrpc.RegisterTestServiceServer(s, statsService{})
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	cc, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithStatsHandler(first), leangrpc.WithStatsHandler(second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctxT(t), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	cc.Close()
	s.Stop()
	<-done
	checkGoroutines(t, base) // the client's ConnEnd has been reported
	// The server reports a call's End after the response went out, so
	// the client may have finished first: wait until both handlers
	// have heard it (Stop does not wait for it, in grpc-go either).
	for deadline := time.Now().Add(5 * time.Second); log.count("*stats.End client=false") < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}

	// Events of the two ends, and a connection's end and a call's, may
	// interleave: check the order per event.
	entries := log.get()
	next := map[string]string{} // event -> the handler due next
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.event] = true
		due := next[e.event]
		if due == "" {
			due = "first"
		}
		if e.handler != due {
			t.Errorf("%s reached %s when %s was due", e.event, e.handler, due)
		}
		next[e.event] = map[string]string{"first": "second", "second": "first"}[e.handler]
		wantTag := "second" // events see the last Tag call's context
		if strings.HasPrefix(e.event, "Tag") {
			wantTag = map[string]string{"first": "", "second": "first"}[e.handler]
			if e.event == "TagRPC client=false" && e.handler == "first" {
				wantTag = "second" // a server call's context derives from its connection's
			}
		}
		if e.tag != wantTag {
			t.Errorf("%s reached %s with the tag %q, want %q", e.event, e.handler, e.tag, wantTag)
		}
	}
	for ev, due := range next {
		if due != "first" {
			t.Errorf("%s reached the first handler only", ev)
		}
	}
	for _, ev := range []string{"TagRPC client=true", "TagRPC client=false", "TagConn client=true", "TagConn client=false",
		"*stats.Begin client=true", "*stats.End client=false", "*stats.ConnEnd client=true", "*stats.ConnEnd client=false"} {
		if !seen[ev] {
			t.Errorf("no %s", ev)
		}
	}
}

// orderEntry is one call of a handler: the event, and the tag found in its
// context (the name of the handler whose Tag call made it).
type orderEntry struct{ handler, event, tag string }

// orderLog records the handlers' calls in order, from any goroutine.
type orderLog struct {
	mu sync.Mutex
	l  []orderEntry
}

func (o *orderLog) add(e orderEntry) { o.mu.Lock(); o.l = append(o.l, e); o.mu.Unlock() }

// count returns how many entries are of event.
func (o *orderLog) count(event string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, e := range o.l {
		if e.event == event {
			n++
		}
	}
	return n
}

func (o *orderLog) get() []orderEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.l)
}

type tagKey struct{}

type orderHandler struct {
	name string
	log  *orderLog
}

func (h *orderHandler) record(ctx context.Context, event string) {
	tag, _ := ctx.Value(tagKey{}).(string)
	h.log.add(orderEntry{handler: h.name, event: event, tag: tag})
}

func (h *orderHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	// Only the server's context has incoming metadata.
	_, server := metadata.FromIncomingContext(ctx)
	h.record(ctx, fmt.Sprintf("TagRPC client=%v", !server))
	return context.WithValue(ctx, tagKey{}, h.name)
}
func (h *orderHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	// Only the server's connection context has the peer.
	_, server := peer.FromContext(ctx)
	h.record(ctx, fmt.Sprintf("TagConn client=%v", !server))
	return context.WithValue(ctx, tagKey{}, h.name)
}
func (h *orderHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	h.record(ctx, fmt.Sprintf("%T client=%v", s, s.IsClient()))
}
func (h *orderHandler) HandleConn(ctx context.Context, s stats.ConnStats) {
	h.record(ctx, fmt.Sprintf("%T client=%v", s, s.IsClient()))
}

// TestStatsConnBeginAfterGreeting: a server reports a connection to its
// stats handlers once the client's preface and SETTINGS came, as grpc-go's
// does: a connection that closes before greeting (a port probe) and one
// that sends half a preface are never reported; a real client's is, with
// ConnBegin and ConnEnd.
func TestStatsConnBeginAfterGreeting(t *testing.T) {
	for _, lean := range []bool{true, false} {
		name := map[bool]string{true: "leangrpc", false: "grpc-go"}[lean]
		t.Run(name, func(t *testing.T) {
			rec := &statsRecorder{}
			addr, stop := startStatsEchoServer(t, lean, rec)
			probe, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			probe.Close()
			half, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			half.Write([]byte("PRI * HTTP/2.0\r\n"))
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
				t.Fatalf("UnaryCall: %v", err)
			}
			cc.Close()
			waitFor(t, "the client's connection to end", func() bool {
				_, conns := rec.snapshot()
				return connsEnded(conns, 1)
			})
			half.Close()
			stop()
			_, conns := rec.snapshot()
			want := []string{"TagConn addrs=true/true", "ConnBegin client=false", "ConnEnd client=false"}
			if len(conns) != 1 || !slices.Equal(conns[0], want) {
				t.Errorf("connection events %q, want one connection with %q", conns, want)
			}
		})
	}
}

// tagInfos records the RPCTagInfo of every call it tags.
type tagInfos struct {
	mu    sync.Mutex
	infos []stats.RPCTagInfo
}

func (r *tagInfos) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	r.mu.Lock()
	r.infos = append(r.infos, *info)
	r.mu.Unlock()
	return ctx
}
func (*tagInfos) HandleRPC(context.Context, stats.RPCStats)                         {}
func (*tagInfos) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (*tagInfos) HandleConn(context.Context, stats.ConnStats)                       {}

// TestStatsNameResolutionDelay: a call that had to wait for the resolver's
// first addresses is tagged with NameResolutionDelay, and the next one is
// not, on leangrpc's client as on grpc-go's.
func TestStatsNameResolutionDelay(t *testing.T) {
	addr, stop := startServer(t, true, serverSettings{})
	defer stop()
	for _, lean := range []bool{false, true} {
		r := manual.NewBuilderWithScheme("delayed")
		built := make(chan struct{})
		r.BuildCallback = func(resolver.Target, resolver.ClientConn, resolver.BuildOptions) { close(built) }
		tags := &tagInfos{}
		cc := dialWith(t, lean, "delayed:///x",
			[]leangrpc.DialOption{leangrpc.WithResolvers(r), leangrpc.WithStatsHandler(tags)},
			[]grpc.DialOption{grpc.WithResolvers(r), grpc.WithStatsHandler(tags)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tc := testgrpc.NewTestServiceClient(cc)
		done := make(chan error, 1)
		go func() {
			_, err := tc.EmptyCall(ctx, &testpb.Empty{})
			done <- err
		}()
		// The call waits for the resolver, which the ClientConn builds
		// when the call takes it out of idle.
		<-built
		time.Sleep(50 * time.Millisecond)
		r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: addr}}})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := tc.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		tags.mu.Lock()
		got := []bool{}
		for _, info := range tags.infos {
			got = append(got, info.NameResolutionDelay)
		}
		tags.mu.Unlock()
		if !slices.Equal(got, []bool{true, false}) {
			t.Errorf("lean client %v: NameResolutionDelay of the two calls %v, want [true false]", lean, got)
		}
	}
}
