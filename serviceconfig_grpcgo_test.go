package leangrpc_test

import (
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// grpcGoParsedConfig returns js as grpc-go's own parser makes it: the
// ParseServiceConfig of a grpc-go ClientConn's resolver.ClientConn.
func grpcGoParsedConfig(t *testing.T, js string) serviceconfig.Config {
	t.Helper()
	got := make(chan *serviceconfig.ParseResult, 1)
	b := &captureBuilder{js: js, got: got}
	cc, err := grpc.NewClient("capture:///x", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(b))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	pr := <-got
	if pr.Err != nil {
		t.Fatalf("grpc-go's parser refused %s: %v", js, pr.Err)
	}
	return pr.Config
}

type captureBuilder struct {
	js  string
	got chan *serviceconfig.ParseResult
}

func (b *captureBuilder) Scheme() string { return "capture" }
func (b *captureBuilder) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	b.got <- cc.ParseServiceConfig(b.js)
	return nopResolver{}, nil
}

// TestGrpcGoServiceConfigJSON: a service config that grpc-go's parser
// made, handed over by a resolver (as grpc-go's customloadbalancer
// example does), applies on a leangrpc channel: its round_robin spreads
// the calls. leangrpc reads the JSON from an unexported field of
// grpc.ServiceConfig; if a grpc-go upgrade moves it, this fails.
func TestGrpcGoServiceConfigJSON(t *testing.T) {
	gc := grpcGoParsedConfig(t, roundRobinConfig)
	bs := lbBackends(t, 2, true)
	r := &fixedConfigResolver{scheme: "grpcgosc", addrs: addrsOf(bs), config: gc}
	cc, err := leangrpc.NewClient("grpcgosc:///svc", leangrpc.WithResolvers(r))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := calledPeer(t, cc); err != nil {
		t.Fatalf("a call under grpc-go's parsed config failed (grpc-go %s; did grpc.ServiceConfig's rawJSONString move?): %v", grpc.Version, err)
	}
	callsUntilAll(t, cc, addrsOf(bs))
}

// fixedConfigResolver reports addresses with an already parsed config.
type fixedConfigResolver struct {
	scheme string
	addrs  []string
	config serviceconfig.Config
}

func (b *fixedConfigResolver) Scheme() string { return b.scheme }
func (b *fixedConfigResolver) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	s := resolver.State{ServiceConfig: &serviceconfig.ParseResult{Config: b.config}}
	for _, a := range b.addrs {
		s.Addresses = append(s.Addresses, resolver.Address{Addr: a})
	}
	cc.UpdateState(s)
	return nopResolver{}, nil
}
