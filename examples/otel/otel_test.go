package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestOpenTelemetry makes a health check through each pairing of a
// leangrpc or grpc-go server with a leangrpc or grpc-go client (at least
// one end leangrpc), both instrumented by otelgrpc, and checks that each
// end made its span, that the server span is the client span's child in
// the same trace, and that each end recorded the call in its RPC metrics.
func TestOpenTelemetry(t *testing.T) {
	for _, p := range []struct {
		name                   string
		leanServer, leanClient bool
	}{
		{"lean-client_lean-server", true, true},
		{"grpc-client_lean-server", true, false},
		{"lean-client_grpc-server", false, true},
	} {
		t.Run(p.name, func(t *testing.T) {
			tel := newTelemetry()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var stop func()
			if p.leanServer {
				stop = startLeanServer(lis, tel)
			} else {
				stop = startGRPCServer(lis, tel)
			}
			defer stop()
			var cc grpc.ClientConnInterface
			if p.leanClient {
				c, err := newLeanClient(lis.Addr().String(), tel)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				cc = c
			} else {
				c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
					grpc.WithStatsHandler(otelgrpc.NewClientHandler(tel.options()...)))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				cc = c
			}

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			client, server := waitSpans(t, tel)
			if !client.SpanContext.TraceID().IsValid() || client.SpanContext.TraceID() != server.SpanContext.TraceID() {
				t.Errorf("trace IDs: client %s, server %s; want the same", client.SpanContext.TraceID(), server.SpanContext.TraceID())
			}
			if server.Parent.SpanID() != client.SpanContext.SpanID() || !server.Parent.IsRemote() {
				t.Errorf("server span's parent %s (remote %v), want the client span %s, remote",
					server.Parent.SpanID(), server.Parent.IsRemote(), client.SpanContext.SpanID())
			}
			const method = "grpc.health.v1.Health/Check"
			if client.Name != method || server.Name != method {
				t.Errorf("span names: client %q, server %q; want %q", client.Name, server.Name, method)
			}

			// The server records its call when its handler's End event
			// runs, which may come after the client has its answer and
			// after the server span ended: collect until both sides
			// counted it, for a bounded time.
			sideCount := func(calls map[string]uint64, side string) uint64 {
				n := uint64(0)
				for name, c := range calls {
					if strings.HasPrefix(name, side) && strings.HasSuffix(name, "duration") {
						n += c
					}
				}
				return n
			}
			var calls map[string]uint64
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				rm, err := tel.collect(ctx)
				if err != nil {
					t.Fatal(err)
				}
				calls = histogramCounts(rm)
				if sideCount(calls, "rpc.server.") >= 1 && sideCount(calls, "rpc.client.") >= 1 || time.Now().After(deadline) {
					break
				}
			}
			for _, side := range []string{"rpc.server.", "rpc.client."} {
				if n := sideCount(calls, side); n != 1 {
					t.Errorf("%s*duration histograms count %d calls, want 1 (all: %v)", side, n, calls)
				}
			}
		})
	}
}

// waitSpans waits for the two spans of the call (the server's ends after
// its response went out, possibly after the client has it) and returns
// them by kind.
func waitSpans(t *testing.T, tel *telemetry) (client, server tracetest.SpanStub) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		spans := tel.spans.GetSpans()
		if len(spans) >= 2 || time.Now().After(deadline) {
			var nc, ns int
			for _, s := range spans {
				switch s.SpanKind {
				case trace.SpanKindClient:
					client = s
					nc++
				case trace.SpanKindServer:
					server = s
					ns++
				}
			}
			if nc != 1 || ns != 1 || len(spans) != 2 {
				t.Fatalf("spans: %d client, %d server, %d in all; want one of each", nc, ns, len(spans))
			}
			return client, server
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// histogramCounts returns the number of measurements of each histogram.
func histogramCounts(rm metricdata.ResourceMetrics) map[string]uint64 {
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					out[m.Name] += dp.Count
				}
			}
		}
	}
	return out
}

// startGRPCServer is startLeanServer with grpc-go's server.
func startGRPCServer(lis net.Listener, tel *telemetry) (stop func()) {
	s := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler(tel.options()...)))
	healthpb.RegisterHealthServer(s, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	return func() { s.Stop(); <-done }
}
