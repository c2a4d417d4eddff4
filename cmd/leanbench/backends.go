package main

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"

	"github.com/leangrpc/leangrpc"
)

// Multi-backend runs (-backends N -lb POLICY): each stack's client channel
// spreads its calls over N servers of the stack's server implementation
// through a load-balancing policy from grpc-go's registry, the way a
// production client balances over the addresses DNS gives it. Both
// stacks get the addresses and the service config from the same resolver
// (benchResolver), so they run the same policy over the same backends.

// benchResolverScheme is the scheme of the target multi-backend clients
// dial.
const benchResolverScheme = "leanbench"

// benchResolver reports a fixed list of addresses and a service config
// naming the policy, parsed by the channel it reports to.
type benchResolver struct {
	addrs  []string
	config string
}

func (b benchResolver) Scheme() string { return benchResolverScheme }

func (b benchResolver) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	s := resolver.State{ServiceConfig: cc.ParseServiceConfig(b.config)}
	for _, a := range b.addrs {
		s.Addresses = append(s.Addresses, resolver.Address{Addr: a})
	}
	if err := cc.UpdateState(s); err != nil {
		return nil, err
	}
	return benchResolver{}, nil
}

func (benchResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (benchResolver) Close()                                {}

// checkLB reports whether policy names a registered policy.
func checkLB(policy string) error {
	if policy != "" && balancer.Get(policy) == nil {
		return fmt.Errorf("-lb %q: no such load-balancing policy registered (try round_robin or pick_first)", policy)
	}
	return nil
}

// lbConfig is the service config that selects policy.
func lbConfig(policy string) string {
	return `{"loadBalancingConfig":[{` + strconv.Quote(policy) + `:{}}]}`
}

// dialBalanced returns a channel of implementation im over addrs with the
// load-balancing policy, over TLS when sec is not nil.
func dialBalanced(im *impl, addrs []string, policy string, sec *benchTLS) (grpc.ClientConnInterface, func() error, error) {
	if policy == "" {
		policy = "pick_first"
	}
	r := benchResolver{addrs: addrs, config: lbConfig(policy)}
	target := benchResolverScheme + ":///backends"
	switch im.name {
	case stackLean, stackLeanNoPool, stackLeanNoLowWater:
		opts := append(leanClientOptions(sec, nil), leangrpc.WithResolvers(r))
		switch im.name {
		case stackLeanNoPool:
			opts = append(opts, leangrpc.WithReadBufferPooling(false))
		case stackLeanNoLowWater:
			opts = append(opts, leangrpc.WithRecvLowWater(false))
		}
		cc, err := leangrpc.NewClient(target, opts...)
		if err != nil {
			return nil, nil, err
		}
		return cc, cc.Close, nil
	case stackGrpc:
		creds := sec.clientCreds()
		if creds == nil {
			creds = insecure.NewCredentials()
		}
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds), grpc.WithResolvers(r),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxBenchMsg)))
		if err != nil {
			return nil, nil, err
		}
		return cc, cc.Close, nil
	}
	return nil, nil, errors.New("no multi-backend client for " + im.name)
}

// lbName is the policy as the report names it.
func lbName(policy string) string {
	if policy == "" {
		return "pick_first"
	}
	return policy
}
