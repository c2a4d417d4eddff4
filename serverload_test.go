package leangrpc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	_ "google.golang.org/grpc/orca" // installs grpc-go's own load parser, for its client's side of the comparison
	"google.golang.org/protobuf/proto"

	"github.com/leangrpc/leangrpc"
)

// loadRecorder is a balancer that places every call on one SubConn and
// records what each call's Done callback hears as ServerLoad.
type loadRecorder struct {
	cc       balancer.ClientConn
	sc       balancer.SubConn
	mu       sync.Mutex
	loads    []any
	trailers []metadata.MD
}

const loadRecorderName = "leangrpc_test_load_recorder"

var (
	loadRecordersMu sync.Mutex
	loadRecorders   []*loadRecorder
)

type loadRecorderBuilder struct{}

func (loadRecorderBuilder) Name() string { return loadRecorderName }
func (loadRecorderBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	b := &loadRecorder{cc: cc}
	loadRecordersMu.Lock()
	loadRecorders = append(loadRecorders, b)
	loadRecordersMu.Unlock()
	return b
}

func init() { balancer.Register(loadRecorderBuilder{}) }

func (b *loadRecorder) UpdateClientConnState(s balancer.ClientConnState) error {
	if b.sc != nil {
		return nil
	}
	sc, err := b.cc.NewSubConn(s.ResolverState.Addresses, balancer.NewSubConnOptions{
		StateListener: func(st balancer.SubConnState) {
			if st.ConnectivityState == connectivity.Ready {
				b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: b})
			}
		},
	})
	if err != nil {
		return err
	}
	b.sc = sc
	sc.Connect()
	return nil
}

func (b *loadRecorder) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: b.sc, Done: func(di balancer.DoneInfo) {
		b.mu.Lock()
		b.loads = append(b.loads, di.ServerLoad)
		b.trailers = append(b.trailers, di.Trailer)
		b.mu.Unlock()
	}}, nil
}

func (b *loadRecorder) ResolverError(error)                                        {}
func (b *loadRecorder) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (b *loadRecorder) Close()                                                     {}
func (b *loadRecorder) ExitIdle()                                                  {}

// TestServerLoad: a balancer's Done callback gets the call's trailers and
// the ORCA load report the
// server sent in the endpoint-load-metrics-bin trailer as
// DoneInfo.ServerLoad, and a nil report of its type when there was none,
// on leangrpc's client as on grpc-go's, from either server.
func TestServerLoad(t *testing.T) {
	report, err := proto.Marshal(&v3orcapb.OrcaLoadReport{RequestCost: map[string]float64{"db_queries": 10}})
	if err != nil {
		t.Fatal(err)
	}
	desc := &grpc.ServiceDesc{
		ServiceName: "behave.Load",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Call",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var req v3orcapb.OrcaLoadReport
				if err := dec(&req); err != nil {
					return nil, err
				}
				if req.GetCpuUtilization() > 0 { // the client asks for a report
					grpc.SetTrailer(ctx, metadata.Pairs("endpoint-load-metrics-bin", string(report)))
				}
				return &v3orcapb.OrcaLoadReport{}, nil
			},
		}},
	}
	sc := `{"loadBalancingConfig": [{"` + loadRecorderName + `":{}}]}`
	forStacks(t, func(t *testing.T, client, server stack) {
		srv := serveOn(t, server.lean, desc, struct{}{})
		loadRecordersMu.Lock()
		loadRecorders = nil
		loadRecordersMu.Unlock()
		cc := dialWith(t, client.lean, srv.addr,
			[]leangrpc.DialOption{leangrpc.WithDefaultServiceConfig(sc)}, []grpc.DialOption{grpc.WithDefaultServiceConfig(sc)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, ask := range []float32{1, 0} {
			if err := cc.Invoke(ctx, "/behave.Load/Call", &v3orcapb.OrcaLoadReport{CpuUtilization: float64(ask)}, &v3orcapb.OrcaLoadReport{}); err != nil {
				t.Fatal(err)
			}
		}
		loadRecordersMu.Lock()
		defer loadRecordersMu.Unlock()
		if len(loadRecorders) != 1 {
			t.Fatalf("%d balancers built, want 1", len(loadRecorders))
		}
		b := loadRecorders[0]
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.loads) != 2 {
			t.Fatalf("Done heard %d calls, want 2", len(b.loads))
		}
		if len(b.trailers[0].Get("endpoint-load-metrics-bin")) != 1 {
			t.Errorf("DoneInfo.Trailer %v lacks the load report's trailer", b.trailers[0])
		}
		got, ok := b.loads[0].(*v3orcapb.OrcaLoadReport)
		if !ok || got.GetRequestCost()["db_queries"] != 10 {
			t.Errorf("with a report: ServerLoad %#v, want the report with db_queries 10", b.loads[0])
		}
		none, ok := b.loads[1].(*v3orcapb.OrcaLoadReport)
		if !ok || none != nil {
			t.Errorf("without a report: ServerLoad %#v, want a nil *OrcaLoadReport", b.loads[1])
		}
	})
}
