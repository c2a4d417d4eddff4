package leangrpc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/balancer"
	estats "google.golang.org/grpc/experimental/stats"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// Load balancing runs through grpc-go's public balancer plug-in API: the
// ClientConn builds the policy the service config names (pick_first when
// it names none) from grpc-go's registry, and is the policy's
// balancer.ClientConn through a balancerWrapper. The policy makes
// SubConns (subconn.go), which are leangrpc connections, and publishes
// pickers that every call consults (picker.go). Every call into a policy
// goes through the ClientConn's serializer, as grpc-go's do.

// defaultPolicy is the policy of a ClientConn whose service config names
// none.
const defaultPolicy = "pick_first"

// balancerWrapper is the balancer.ClientConn of one policy instance. A
// policy that is replaced (the service config named another) or closed
// (the ClientConn went idle or closed) keeps its wrapper, which then
// ignores it.
type balancerWrapper struct {
	// balancer.ClientConn is embedded, nil, because grpc-go requires
	// implementations to embed the interface; every method it has today
	// is implemented below.
	balancer.ClientConn

	cc   *ClientConn
	name string
	bal  balancer.Balancer

	mu     sync.Mutex
	closed bool
	// subConns are the SubConns it made and has not shut down; a slice,
	// since a channel has few and an idle one should cost little.
	subConns []*subConn
}

// newBalancer builds the named policy; the caller runs it in the
// serializer.
func (cc *ClientConn) newBalancer(name string) (*balancerWrapper, error) {
	b := balancer.Get(name)
	if b == nil {
		return nil, fmt.Errorf("leangrpc: no balancer registered as %q", name)
	}
	bw := &balancerWrapper{cc: cc, name: name}
	bw.bal = b.Build(bw, balancer.BuildOptions{
		DialCreds:       cc.opts.creds,
		CredsBundle:     cc.opts.bundle,
		Dialer:          cc.opts.dialer,
		Authority:       cc.authority,
		CustomUserAgent: cc.customUserAgent(),
		Target:          cc.parsedTarget(),
	})
	return bw, nil
}

// customUserAgent is WithUserAgent's string, which the ClientConn keeps
// only as the prefix of its user-agent.
func (cc *ClientConn) customUserAgent() string {
	if cc.userAgent == userAgent {
		return ""
	}
	return strings.TrimSuffix(cc.userAgent, " "+userAgent)
}

func (bw *balancerWrapper) isClosed() bool {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	return bw.closed
}

// close closes the policy and shuts its SubConns down (grpc-go's
// balancers need not do it themselves); it runs in the serializer.
func (bw *balancerWrapper) close() {
	bw.mu.Lock()
	if bw.closed {
		bw.mu.Unlock()
		return
	}
	bw.closed = true
	bw.mu.Unlock()
	bw.bal.Close()
	bw.mu.Lock()
	scs := bw.subConns
	bw.subConns = nil
	bw.mu.Unlock()
	for _, sc := range scs {
		sc.Shutdown()
	}
}

// NewSubConn makes a SubConn over addrs; it starts IDLE and connects when
// the policy calls Connect.
func (bw *balancerWrapper) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	if len(addrs) == 0 {
		return nil, errors.New("grpc: cannot create SubConn with empty address list")
	}
	sc := newSubConn(bw, addrs, opts)
	bw.mu.Lock()
	if bw.closed {
		bw.mu.Unlock()
		return nil, errors.New("balancer is being closed; no new SubConns allowed")
	}
	bw.subConns = append(bw.subConns, sc)
	bw.mu.Unlock()
	return sc, nil
}

// RemoveSubConn shuts sc down (the deprecated form of sc.Shutdown).
func (bw *balancerWrapper) RemoveSubConn(sc balancer.SubConn) { sc.Shutdown() }

// UpdateAddresses is the deprecated form of sc.UpdateAddresses.
func (bw *balancerWrapper) UpdateAddresses(sc balancer.SubConn, addrs []resolver.Address) {
	sc.UpdateAddresses(addrs)
}

// UpdateState publishes the policy's picker and connectivity state.
func (bw *balancerWrapper) UpdateState(s balancer.State) {
	bw.mu.Lock()
	closed := bw.closed
	bw.mu.Unlock()
	if closed {
		return
	}
	bw.cc.balancerState(bw, s)
}

// ResolveNow asks the resolver to resolve again.
func (bw *balancerWrapper) ResolveNow(resolver.ResolveNowOptions) { bw.cc.resolveNow() }

// Target is the ClientConn's target.
func (bw *balancerWrapper) Target() string { return bw.cc.target }

// MetricsRecorder returns a recorder that drops what it is given: leangrpc
// has no metrics registry of its own, and grpc-go promises policies a
// recorder that is never nil.
func (bw *balancerWrapper) MetricsRecorder() estats.MetricsRecorder { return noMetrics{} }

// current returns the SubConns not shut down (a copy).
func (bw *balancerWrapper) current() []*subConn {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	return slices.Clone(bw.subConns)
}

// forget drops sc from the policy's SubConns after its Shutdown.
func (bw *balancerWrapper) forget(sc *subConn) {
	bw.mu.Lock()
	if i := slices.Index(bw.subConns, sc); i >= 0 {
		last := len(bw.subConns) - 1
		bw.subConns[i] = bw.subConns[last]
		bw.subConns[last] = nil
		bw.subConns = bw.subConns[:last]
	}
	bw.mu.Unlock()
}

// noMetrics is a MetricsRecorder that records nothing.
type noMetrics struct {
	// Embedded, nil, as grpc-go requires of implementations.
	estats.MetricsRecorder
}

func (noMetrics) RecordInt64Count(*estats.Int64CountHandle, int64, ...string)             {}
func (noMetrics) RecordFloat64Count(*estats.Float64CountHandle, float64, ...string)       {}
func (noMetrics) RecordInt64Histo(*estats.Int64HistoHandle, int64, ...string)             {}
func (noMetrics) RecordFloat64Histo(*estats.Float64HistoHandle, float64, ...string)       {}
func (noMetrics) RecordInt64Gauge(*estats.Int64GaugeHandle, int64, ...string)             {}
func (noMetrics) RecordInt64UpDownCount(*estats.Int64UpDownCountHandle, int64, ...string) {}
func (noMetrics) RegisterAsyncReporter(estats.AsyncMetricReporter, ...estats.AsyncMetric) func() {
	return func() {}
}

// lbPolicy returns the policy a service config names and its parsed
// configuration: pick_first without one.
func lbPolicy(sc *serviceConfig) (string, serviceconfig.LoadBalancingConfig) {
	if sc == nil || sc.lbName == "" {
		return defaultPolicy, nil
	}
	return sc.lbName, sc.lbConfig
}
