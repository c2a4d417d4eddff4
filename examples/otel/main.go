// Command otel traces and measures leangrpc calls with OpenTelemetry's
// gRPC instrumentation (otelgrpc), which plugs into leangrpc as it plugs
// into grpc-go: as a stats handler. It starts a leangrpc server and client
// on loopback, makes one health check, and prints the spans and the RPC
// metrics the two ends recorded: a client span, a server span whose parent
// is the client span (the trace context travels in the request's
// traceparent header), and each end's call-duration histogram.
//
// It is a module of its own so that leangrpc itself does not depend on
// OpenTelemetry.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/leangrpc/leangrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// telemetry holds what the calls record: spans in memory, metrics read on
// demand.
type telemetry struct {
	spans   *tracetest.InMemoryExporter
	metrics *sdkmetric.ManualReader
	tp      *sdktrace.TracerProvider
	mp      *sdkmetric.MeterProvider
}

func newTelemetry() *telemetry {
	t := &telemetry{spans: tracetest.NewInMemoryExporter(), metrics: sdkmetric.NewManualReader()}
	// A syncer exports each span when it ends, so that the spans are
	// there as soon as the calls return.
	t.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(t.spans))
	t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(t.metrics))
	return t
}

// options are otelgrpc's options for either end: this telemetry's
// providers, and W3C trace context as the propagation format (otelgrpc
// otherwise uses the global propagator, which propagates nothing unless
// the program sets one).
func (t *telemetry) options() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithMeterProvider(t.mp),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
	}
}

// collect reads the metrics recorded so far.
func (t *telemetry) collect(ctx context.Context) (metricdata.ResourceMetrics, error) {
	var rm metricdata.ResourceMetrics
	err := t.metrics.Collect(ctx, &rm)
	return rm, err
}

// startLeanServer serves the health service on lis with leangrpc,
// instrumented by otelgrpc; stop stops it.
func startLeanServer(lis net.Listener, t *telemetry) (stop func()) {
	s := leangrpc.NewServer(leangrpc.StatsHandler(otelgrpc.NewServerHandler(t.options()...)))
	healthpb.RegisterHealthServer(s, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	return func() { s.Stop(); <-done }
}

// newLeanClient is a leangrpc client of addr instrumented by otelgrpc.
func newLeanClient(addr string, t *telemetry) (*leangrpc.ClientConn, error) {
	return leangrpc.NewClient(addr, leangrpc.WithStatsHandler(otelgrpc.NewClientHandler(t.options()...)))
}

func main() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	tel := newTelemetry()
	stop := startLeanServer(lis, tel)
	defer stop()
	cc, err := newLeanClient(lis.Addr().String(), tel)
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("health:", res.GetStatus())

	// The server ends its span after the response went out, which may be
	// a moment after the client has it.
	for deadline := time.Now().Add(5 * time.Second); len(tel.spans.GetSpans()) < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range tel.spans.GetSpans() {
		fmt.Printf("span %-6s %s trace=%s span=%s parent=%s\n",
			s.SpanKind, s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID())
	}
	rm, err := tel.collect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				n := uint64(0)
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
				fmt.Printf("metric %s: %d calls\n", m.Name, n)
			}
		}
	}
}
