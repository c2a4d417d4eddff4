package leangrpc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Client-side health checking (gRFC A17): when the service config has a
// healthCheckConfig and WithDisableHealthCheck is not given, a balancer
// that registers a health listener on a READY SubConn hears the server's
// grpc.health.v1.Health/Watch answers for the configured service instead
// of READY alone. grpc-go runs the check only when its health package is
// imported (it registers the checker through an internal hook); leangrpc
// has the checker built in, so the service config alone turns it on.

// healthReg is one registered health listener; stop ends its watch.
type healthReg struct {
	cancel context.CancelFunc // nil when no watch runs
}

func (h *healthReg) stop() {
	if h != nil && h.cancel != nil {
		h.cancel()
	}
}

// healthService returns the service name to watch, and false when health
// checking is off.
func (cc *ClientConn) healthService() (string, bool) {
	if cc.opts.disableHealthCheck {
		return "", false
	}
	cfg := cc.sc.Load()
	if cfg == nil || cfg.healthCheckService == nil {
		return "", false
	}
	return *cfg.healthCheckService, true
}

// RegisterHealthListener registers the balancer's listener for the health
// of a READY SubConn, replacing the one before (nil drops it). Without
// health checking the listener hears READY once.
func (sc *subConn) RegisterHealthListener(listener func(balancer.SubConnState)) {
	sc.mu.Lock()
	old := sc.health
	sc.health = nil
	if sc.notified != connectivity.Ready || listener == nil {
		sc.mu.Unlock()
		old.stop()
		return
	}
	h := &healthReg{}
	sc.health = h
	service, on := sc.cc().healthService()
	var ctx context.Context
	if on {
		ctx, h.cancel = context.WithCancel(context.Background())
	}
	sc.mu.Unlock()
	old.stop()
	// The balancer may hold its lock while it registers, and listeners
	// take it: reports never run on the registering goroutine.
	report := func(st balancer.SubConnState) {
		sc.cc().ser.enqueue(func() {
			sc.mu.Lock()
			current := sc.health == h
			sc.mu.Unlock()
			if current && !sc.bw.isClosed() {
				listener(st)
			}
		})
		sc.cc().ser.drainAsync()
	}
	if !on {
		report(balancer.SubConnState{ConnectivityState: connectivity.Ready})
		return
	}
	go sc.watchHealth(ctx, service, report)
}

// watchHealth runs the Watch stream for service on the SubConn and reports
// each answer: SERVING is READY, anything else TRANSIENT_FAILURE. A
// server without the health service counts as healthy, as in grpc-go. A
// stream that fails is opened again, after a backoff unless it had
// delivered an answer.
func (sc *subConn) watchHealth(ctx context.Context, service string, report func(balancer.SubConnState)) {
	failures := 0
	for ctx.Err() == nil {
		if failures > 0 {
			t := time.NewTimer(sc.cc().opts.backoff.delay(failures - 1))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		failures++
		report(balancer.SubConnState{ConnectivityState: connectivity.Connecting})
		answered, err := sc.watchOnce(ctx, service, report)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			logger.Errorf("health check of %v: the server does not implement grpc.health.v1.Health; health checking is off for this connection", sc)
			report(balancer.SubConnState{ConnectivityState: connectivity.Ready})
			return
		}
		if err != nil {
			report(balancer.SubConnState{
				ConnectivityState: connectivity.TransientFailure,
				ConnectionError:   fmt.Errorf("connection active but received health check RPC error: %v", err),
			})
		}
		if answered {
			failures = 0
		}
	}
}

// healthWatchDesc is the Watch method's shape: one request, a stream of
// answers.
var healthWatchDesc = &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}

// watchOnce runs one Watch stream until it fails; answered says whether it
// delivered an answer.
func (sc *subConn) watchOnce(ctx context.Context, service string, report func(balancer.SubConnState)) (answered bool, err error) {
	cs, err := sc.NewStream(ctx, healthWatchDesc, healthpb.Health_Watch_FullMethodName)
	if err != nil {
		return false, err
	}
	if err := cs.SendMsg(&healthpb.HealthCheckRequest{Service: service}); err != nil {
		return false, cs.RecvMsg(new(healthpb.HealthCheckResponse))
	}
	cs.CloseSend()
	for {
		resp := new(healthpb.HealthCheckResponse)
		if err := cs.RecvMsg(resp); err != nil {
			return answered, err
		}
		answered = true
		if resp.Status == healthpb.HealthCheckResponse_SERVING {
			report(balancer.SubConnState{ConnectivityState: connectivity.Ready})
		} else {
			report(balancer.SubConnState{
				ConnectivityState: connectivity.TransientFailure,
				ConnectionError:   fmt.Errorf("connection active but health check failed. status=%s", resp.Status),
			})
		}
	}
}
