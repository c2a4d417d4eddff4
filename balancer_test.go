package leangrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	_ "google.golang.org/grpc/balancer/leastrequest"
	"google.golang.org/grpc/balancer/pickfirst"
	_ "google.golang.org/grpc/balancer/ringhash"
	_ "google.golang.org/grpc/balancer/weightedroundrobin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// lbBackend is a test server with a health service, on either stack.
type lbBackend struct {
	addr   string
	health *health.Server
}

// lbBackends starts n test servers of the given stack, each serving the
// test service and the health service.
func lbBackends(t *testing.T, n int, lean bool) []lbBackend {
	t.Helper()
	var out []lbBackend
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := health.NewServer()
		done := make(chan struct{})
		var stop func()
		if lean {
			s := leangrpc.NewServer()
			testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
			healthgrpc.RegisterHealthServer(s, hs)
			go func() { defer close(done); s.Serve(lis) }()
			stop = s.Stop
		} else {
			s := grpc.NewServer()
			testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
			healthgrpc.RegisterHealthServer(s, hs)
			go func() { defer close(done); s.Serve(lis) }()
			stop = s.Stop
		}
		t.Cleanup(func() { hs.Shutdown(); stop(); <-done })
		out = append(out, lbBackend{addr: lis.Addr().String(), health: hs})
	}
	return out
}

// configResolver is a resolver builder whose resolvers report the
// addresses and service config (JSON, "" for none) set on it, at Build and
// on every update; the service config is parsed by the ClientConn it
// reports to, as a real resolver's is.
type configResolver struct {
	scheme string
	mu     sync.Mutex
	addrs  []string
	config string
	ccs    []resolver.ClientConn
}

func (b *configResolver) Scheme() string { return b.scheme }

func (b *configResolver) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	b.mu.Lock()
	b.ccs = append(b.ccs, cc)
	b.mu.Unlock()
	b.report(cc)
	return nopResolver{}, nil
}

func (b *configResolver) state(cc resolver.ClientConn) resolver.State {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s resolver.State
	for _, a := range b.addrs {
		s.Addresses = append(s.Addresses, resolver.Address{Addr: a})
	}
	if b.config != "" {
		s.ServiceConfig = cc.ParseServiceConfig(b.config)
	}
	return s
}

func (b *configResolver) report(cc resolver.ClientConn) { cc.UpdateState(b.state(cc)) }

// set changes the addresses and config and reports them to every
// ClientConn built so far.
func (b *configResolver) set(config string, addrs ...string) {
	b.mu.Lock()
	b.addrs, b.config = addrs, config
	ccs := append([]resolver.ClientConn(nil), b.ccs...)
	b.mu.Unlock()
	for _, cc := range ccs {
		b.report(cc)
	}
}

func newConfigResolver(scheme, config string, addrs ...string) *configResolver {
	return &configResolver{scheme: scheme, addrs: addrs, config: config}
}

func addrsOf(bs []lbBackend) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.addr)
	}
	return out
}

// forLBPairs runs f for every pairing of client stack and server stack.
func forLBPairs(t *testing.T, f func(t *testing.T, leanClient, leanServer bool)) {
	for _, lc := range []bool{true, false} {
		for _, ls := range []bool{true, false} {
			name := fmt.Sprintf("%s-client/%s-server", stackName(lc), stackName(ls))
			t.Run(name, func(t *testing.T) {
				base, bufs := baseline()
				t.Run("body", func(t *testing.T) { f(t, lc, ls) })
				checkGoroutines(t, base)
				checkBuffers(t, bufs)
			})
		}
	}
}

func stackName(lean bool) string {
	if lean {
		return "lean"
	}
	return "grpc"
}

// callsUntilAll calls until every address in want has served a call, and
// fails the test if that takes longer than 10 s.
func callsUntilAll(t *testing.T, cc grpc.ClientConnInterface, want []string) {
	t.Helper()
	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < len(want) {
		got, err := calledPeer(t, cc)
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		seen[got] = true
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s calls went to %v, want all of %v", seen, want)
		}
	}
	for _, a := range want {
		if !seen[a] {
			t.Fatalf("calls went to %v, want only %v", seen, want)
		}
	}
}

// spread makes n calls and counts them by the address that served each.
func spread(t *testing.T, cc grpc.ClientConnInterface, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for range n {
		got, err := calledPeer(t, cc)
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		counts[got]++
	}
	return counts
}

const roundRobinConfig = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// TestBalancerRoundRobin: with round_robin from the resolver's service
// config, calls rotate over every backend, each getting the same share.
func TestBalancerRoundRobin(t *testing.T) {
	forLBPairs(t, func(t *testing.T, leanClient, leanServer bool) {
		bs := lbBackends(t, 3, leanServer)
		r := newConfigResolver("lbrr", roundRobinConfig, addrsOf(bs)...)
		cc, err := newStackClient(leanClient, "lbrr:///svc", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		callsUntilAll(t, cc, addrsOf(bs))
		counts := spread(t, cc, 30)
		for _, b := range bs {
			if counts[b.addr] != 10 {
				t.Fatalf("30 calls spread as %v, want 10 on each backend", counts)
			}
		}
	})
}

// TestBalancerAddressUpdates: when the resolver replaces a backend,
// round_robin's calls follow the new list.
func TestBalancerAddressUpdates(t *testing.T) {
	forLBPairs(t, func(t *testing.T, leanClient, leanServer bool) {
		bs := lbBackends(t, 3, leanServer)
		r := newConfigResolver("lbupd", roundRobinConfig, bs[0].addr, bs[1].addr)
		cc, err := newStackClient(leanClient, "lbupd:///svc", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		callsUntilAll(t, cc, []string{bs[0].addr, bs[1].addr})
		r.set(roundRobinConfig, bs[1].addr, bs[2].addr)
		deadline := time.Now().Add(10 * time.Second)
		for {
			counts := spread(t, cc, 10)
			if counts[bs[0].addr] == 0 && counts[bs[1].addr] > 0 && counts[bs[2].addr] > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("calls spread as %v 10 s after the update, want only %s and %s", counts, bs[1].addr, bs[2].addr)
			}
		}
	})
}

// TestBalancerPolicySwitch: without a service config calls stay on the
// first backend (pick_first); when the resolver's config names
// round_robin, they spread over both.
func TestBalancerPolicySwitch(t *testing.T) {
	forLBPairs(t, func(t *testing.T, leanClient, leanServer bool) {
		bs := lbBackends(t, 2, leanServer)
		r := newConfigResolver("lbswitch", "", addrsOf(bs)...)
		cc, err := newStackClient(leanClient, "lbswitch:///svc", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if counts := spread(t, cc, 10); counts[bs[0].addr] != 10 {
			t.Fatalf("pick_first spread 10 calls as %v, want all on %s", counts, bs[0].addr)
		}
		r.set(roundRobinConfig, addrsOf(bs)...)
		callsUntilAll(t, cc, addrsOf(bs))
	})
}

// TestBalancerRegisteredPolicies: the policies that register by being
// imported run with their JSON configs and serve calls over several
// backends.
func TestBalancerRegisteredPolicies(t *testing.T) {
	configs := map[string]string{
		"pick_first shuffled":        `{"loadBalancingConfig":[{"pick_first":{"shuffleAddressList":true}}]}`,
		"least_request_experimental": `{"loadBalancingConfig":[{"least_request_experimental":{"choiceCount":2}}]}`,
		"weighted_round_robin":       `{"loadBalancingConfig":[{"weighted_round_robin":{}}]}`,
		"ring_hash_experimental":     `{"loadBalancingConfig":[{"ring_hash_experimental":{"minRingSize":16,"maxRingSize":64,"requestHashHeader":"x-hash"}}]}`,
		"unknown then round_robin":   `{"loadBalancingConfig":[{"no_such_policy":{}},{"round_robin":{}}]}`,
	}
	for name, config := range configs {
		t.Run(name, func(t *testing.T) {
			forLBPairs(t, func(t *testing.T, leanClient, leanServer bool) {
				bs := lbBackends(t, 3, leanServer)
				r := newConfigResolver("lbreg", config, addrsOf(bs)...)
				cc, err := newStackClient(leanClient, "lbreg:///svc", r)
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				counts := spread(t, cc, 20)
				n := 0
				for _, c := range counts {
					n += c
				}
				if n != 20 {
					t.Fatalf("calls spread as %v", counts)
				}
			})
		})
	}
}

// TestBalancerHealthCheck: with healthCheckConfig, round_robin sends no
// calls to a backend whose health service says NOT_SERVING, and sends
// them again once it serves.
func TestBalancerHealthCheck(t *testing.T) {
	const config = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":"svc"}}`
	forLBPairs(t, func(t *testing.T, leanClient, leanServer bool) {
		bs := lbBackends(t, 2, leanServer)
		for _, b := range bs {
			b.health.SetServingStatus("svc", healthgrpc.HealthCheckResponse_SERVING)
		}
		r := newConfigResolver("lbhealth", config, addrsOf(bs)...)
		cc, err := newStackClient(leanClient, "lbhealth:///svc", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		callsUntilAll(t, cc, addrsOf(bs))
		bs[0].health.SetServingStatus("svc", healthgrpc.HealthCheckResponse_NOT_SERVING)
		deadline := time.Now().Add(10 * time.Second)
		for {
			counts := spread(t, cc, 10)
			if counts[bs[0].addr] == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("calls still reach the NOT_SERVING backend: %v", counts)
			}
		}
		bs[0].health.SetServingStatus("svc", healthgrpc.HealthCheckResponse_SERVING)
		callsUntilAll(t, cc, addrsOf(bs))
	})
}

// TestBalancerHealthCheckUnimplemented: a backend without the health
// service counts as healthy.
func TestBalancerHealthCheckUnimplemented(t *testing.T) {
	const config = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":"svc"}}`
	forLBPairs(t, func(t *testing.T, leanClient, leanServer bool) {
		a := leanTestServer(t)
		r := newConfigResolver("lbnohealth", config, a)
		cc, err := newStackClient(leanClient, "lbnohealth:///svc", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if got, err := calledPeer(t, cc); err != nil || got != a {
			t.Fatalf("call went to %q (%v), want %q", got, err, a)
		}
	})
}

// pickLog records what a test policy's picker and Done callbacks saw.
type pickLog struct {
	mu    sync.Mutex
	picks []string // method names
	done  []error  // DoneInfo.Err of every finished call
}

// testPolicy wraps pick_first. Its picker fails calls of failMethod with
// ResourceExhausted, and records the picks and the Done calls of the
// others; the customloadbalancer example of grpc-go is built the same
// way.
type testPolicy struct {
	name string
	log  *pickLog
}

const failMethod = "/grpc.testing.TestService/StreamingInputCall"

func (p testPolicy) Name() string { return p.name }

func (p testPolicy) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	w := &testPolicyCC{ClientConn: cc, log: p.log}
	return balancer.Get(pickfirst.Name).Build(w, opts)
}

type testPolicyCC struct {
	balancer.ClientConn
	log *pickLog
}

func (w *testPolicyCC) UpdateState(s balancer.State) {
	s.Picker = &testPicker{next: s.Picker, log: w.log}
	w.ClientConn.UpdateState(s)
}

type testPicker struct {
	next balancer.Picker
	log  *pickLog
}

func (p *testPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if info.FullMethodName == failMethod {
		return balancer.PickResult{}, status.Error(codes.ResourceExhausted, "test policy refuses this method")
	}
	res, err := p.next.Pick(info)
	if err != nil {
		return res, err
	}
	p.log.mu.Lock()
	p.log.picks = append(p.log.picks, info.FullMethodName)
	p.log.mu.Unlock()
	res.Done = func(d balancer.DoneInfo) {
		p.log.mu.Lock()
		p.log.done = append(p.log.done, d.Err)
		p.log.mu.Unlock()
	}
	res.Metadata = map[string][]string{"x-picked-by": {"test-policy"}}
	return res, nil
}

// TestBalancerCustomPolicy: a policy registered in grpc-go's registry
// runs; its picker's status errors fail calls with that status, and its
// Done hears every call it placed, with the call's error.
func TestBalancerCustomPolicy(t *testing.T) {
	forLBPairs(t, func(t *testing.T, leanClient, leanServer bool) {
		log := &pickLog{}
		name := fmt.Sprintf("leangrpc_test_policy_%s_%s", stackName(leanClient), stackName(leanServer))
		balancer.Register(testPolicy{name: name, log: log})
		bs := lbBackends(t, 1, leanServer)
		r := newConfigResolver("lbcustom", fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}]}`, name), bs[0].addr)
		cc, err := newStackClient(leanClient, "lbcustom:///svc", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := testgrpc.NewTestServiceClient(cc)
		if _, err := client.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		if _, err = client.StreamingInputCall(ctxT(t)); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("StreamingInputCall: %v, want the picker's ResourceExhausted", err)
		}
		// A failing call reports its error to Done.
		_, err = client.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound)}})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("UnaryCall asking for NotFound: %v", err)
		}
		stream, err := client.FullDuplexCall(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		stream.CloseSend()
		if _, err := stream.Recv(); err == nil {
			t.Fatal("Recv on an empty duplex call returned a message")
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.picks) != 3 || len(log.done) != 3 {
			t.Fatalf("picks %v, done %v: want three of each", log.picks, log.done)
		}
		if log.done[0] != nil || status.Code(log.done[1]) != codes.NotFound || log.done[2] != nil {
			t.Fatalf("Done errors %v, want [nil NotFound nil]", log.done)
		}
	})
}

// TestBalancerPickerMetadata: metadata a picker adds reaches the server.
func TestBalancerPickerMetadata(t *testing.T) {
	forLBPairs(t, func(t *testing.T, leanClient, leanServer bool) {
		name := fmt.Sprintf("leangrpc_test_md_%s_%s", stackName(leanClient), stackName(leanServer))
		balancer.Register(testPolicy{name: name, log: &pickLog{}})
		got := make(chan []string, 1)
		srv := serveOn(t, leanServer, streamService(func(_ any, ss grpc.ServerStream) error {
			md, _ := metadata.FromIncomingContext(ss.Context())
			got <- md["x-picked-by"]
			return nil
		}), nil)
		r := newConfigResolver("lbmd", fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}]}`, name), srv.addr)
		cc, err := newStackClient(leanClient, "lbmd:///svc", r)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		s, err := cc.NewStream(ctxT(t), bidiDesc, streamMethod)
		if err != nil {
			t.Fatal(err)
		}
		s.CloseSend()
		s.RecvMsg(new(testpb.Empty))
		if v := <-got; len(v) != 1 || v[0] != "test-policy" {
			t.Fatalf("server saw x-picked-by %q, want [test-policy]", v)
		}
	})
}

// TestBalancerStateFollowsPolicy: the channel's connectivity state is the
// policy's: IDLE before the first call, READY once round_robin has a
// backend, TRANSIENT_FAILURE when the resolver leaves it none.
func TestBalancerStateFollowsPolicy(t *testing.T) {
	bs := lbBackends(t, 2, true)
	r := newConfigResolver("lbstate", roundRobinConfig, addrsOf(bs)...)
	cc, err := leangrpc.NewClient("lbstate:///svc", leangrpc.WithResolvers(r))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if s := cc.GetState(); s != connectivity.Idle {
		t.Fatalf("state before any call: %v, want IDLE", s)
	}
	cc.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("state %v after 10 s, want READY", s)
		}
	}
	r.set(roundRobinConfig) // no addresses: round_robin fails
	for s := cc.GetState(); s != connectivity.TransientFailure; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("state %v after the resolver dropped every address, want TRANSIENT_FAILURE", s)
		}
	}
	_, err = calledPeer(t, cc)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("call without addresses: %v, want Unavailable", err)
	}
}

// gatePolicy wraps pick_first with a picker that refuses every pick
// while its gate is closed: with balancer.ErrNoSubConnAvailable (calls
// queue) or with a plain error (fail-fast calls fail, wait-for-ready calls
// queue). open republishes the last state with the gate open.
type gatePolicy struct {
	name  string
	plain bool // refuse with a plain error rather than ErrNoSubConnAvailable
	gate  *gate
}

type gate struct {
	mu    sync.Mutex
	open  bool
	cc    balancer.ClientConn
	state balancer.State
}

func (g *gate) openAndPublish() {
	g.mu.Lock()
	g.open = true
	cc, st := g.cc, g.state
	g.mu.Unlock()
	if cc != nil {
		cc.UpdateState(st)
	}
}

func (p gatePolicy) Name() string { return p.name }

func (p gatePolicy) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	return balancer.Get(pickfirst.Name).Build(&gateCC{ClientConn: cc, p: p}, opts)
}

type gateCC struct {
	balancer.ClientConn
	p gatePolicy
}

func (w *gateCC) UpdateState(s balancer.State) {
	next := s.Picker
	s.Picker = gatePicker{next: next, p: w.p}
	w.p.gate.mu.Lock()
	w.p.gate.cc, w.p.gate.state = w.ClientConn, s
	w.p.gate.mu.Unlock()
	w.ClientConn.UpdateState(s)
}

type gatePicker struct {
	next balancer.Picker
	p    gatePolicy
}

func (g gatePicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	g.p.gate.mu.Lock()
	open := g.p.gate.open
	g.p.gate.mu.Unlock()
	if open {
		return g.next.Pick(info)
	}
	if g.p.plain {
		return balancer.PickResult{}, errors.New("gate closed")
	}
	return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
}

// TestBalancerPickerQueues: calls wait while the picker has no SubConn
// for them and go on when the policy publishes one that has; a plain
// picker error fails a fail-fast call with Unavailable and its message,
// and makes a wait-for-ready call wait.
func TestBalancerPickerQueues(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			forLBPairs(t, func(t *testing.T, leanClient, leanServer bool) {
				g := &gate{}
				name := fmt.Sprintf("leangrpc_test_gate_%v_%s_%s", plain, stackName(leanClient), stackName(leanServer))
				balancer.Register(gatePolicy{name: name, plain: plain, gate: g})
				bs := lbBackends(t, 1, leanServer)
				r := newConfigResolver("lbgate", fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}]}`, name), bs[0].addr)
				cc, err := newStackClient(leanClient, "lbgate:///svc", r)
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				client := testgrpc.NewTestServiceClient(cc)
				if plain {
					_, err := client.EmptyCall(ctxT(t), &testpb.Empty{})
					if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "gate closed" {
						t.Fatalf("fail-fast call on a closed gate: %v, want Unavailable \"gate closed\"", err)
					}
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					_, err := client.EmptyCall(ctx, &testpb.Empty{})
					cancel()
					if status.Code(err) != codes.DeadlineExceeded {
						t.Fatalf("call on a closed gate: %v, want DeadlineExceeded after waiting", err)
					}
				}
				result := make(chan error, 1)
				go func() {
					_, err := client.EmptyCall(ctxT(t), &testpb.Empty{}, grpc.WaitForReady(true))
					result <- err
				}()
				select {
				case err := <-result:
					t.Fatalf("wait-for-ready call ended before the gate opened: %v", err)
				case <-time.After(50 * time.Millisecond):
				}
				g.openAndPublish()
				if err := <-result; err != nil {
					t.Fatalf("queued call after the gate opened: %v", err)
				}
			})
		})
	}
}

// TestResolverServiceConfig: a service config from the resolver applies
// (its method config's timeout ends a slow call), wins over the default
// one, is ignored under WithDisableServiceConfig, and an invalid one
// before any valid one fails calls with grpc-go's status.
func TestResolverServiceConfig(t *testing.T) {
	const timeoutConfig = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],"timeout":"0.05s"}]}`
	slow := func(t *testing.T, cc grpc.ClientConnInterface) error {
		// A streaming call that the server answers after 2 s.
		s, err := testgrpc.NewTestServiceClient(cc).StreamingOutputCall(ctxT(t), &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: 1, IntervalUs: 2_000_000}},
		})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	forClients(t, func(t *testing.T, lean bool) {
		a := leanTestServer(t)
		t.Run("applied", func(t *testing.T) {
			r := newConfigResolver("scapply", timeoutConfig, a)
			cc, err := newStackClient(lean, "scapply:///svc", r)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			if err := slow(t, cc); status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("slow call under the resolver's 50 ms timeout: %v, want DeadlineExceeded", err)
			}
		})
		t.Run("disabled", func(t *testing.T) {
			r := newConfigResolver("scoff", timeoutConfig, a)
			var cc stackClient
			var err error
			if lean {
				cc, err = leangrpc.NewClient("scoff:///svc", leangrpc.WithResolvers(r), leangrpc.WithDisableServiceConfig())
			} else {
				cc, err = grpc.NewClient("scoff:///svc", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r), grpc.WithDisableServiceConfig())
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
			defer cancel()
			s, err := testgrpc.NewTestServiceClient(cc).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
				ResponseParameters: []*testpb.ResponseParameters{{Size: 1, IntervalUs: 100_000}},
			})
			if err == nil {
				_, err = s.Recv()
			}
			if err != nil {
				t.Fatalf("a 100 ms call with the resolver's 50 ms timeout disabled: %v", err)
			}
		})
		t.Run("invalid", func(t *testing.T) {
			r := newConfigResolver("scbad", `{"methodConfig": "not a list"}`, a)
			cc, err := newStackClient(lean, "scbad:///svc", r)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			_, err = calledPeer(t, cc)
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "error parsing service config") {
				t.Fatalf("call under an invalid resolver config: %v, want Unavailable \"error parsing service config\"", err)
			}
		})
	})
}
