package leangrpc

// TEMPORARY: replaced by the service config parser when it lands.

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/serviceconfig"
)

type serviceConfig struct {
	serviceconfig.Config
	lbName             string
	lbConfig           serviceconfig.LoadBalancingConfig
	healthCheckService *string
}

func parseServiceConfig(js string, _ int) (*serviceConfig, error) {
	var raw struct {
		LoadBalancingPolicy string
		LoadBalancingConfig []map[string]json.RawMessage
		HealthCheckConfig   *struct{ ServiceName string }
	}
	if err := json.Unmarshal([]byte(js), &raw); err != nil {
		return nil, err
	}
	sc := &serviceConfig{}
	if raw.HealthCheckConfig != nil {
		s := raw.HealthCheckConfig.ServiceName
		sc.healthCheckService = &s
	}
	if raw.LoadBalancingPolicy != "" {
		sc.lbName = raw.LoadBalancingPolicy
	}
	for _, m := range raw.LoadBalancingConfig {
		for name, cfg := range m {
			b := balancer.Get(name)
			if b == nil {
				continue
			}
			sc.lbName = name
			if p, ok := b.(balancer.ConfigParser); ok {
				c, err := p.ParseConfig(cfg)
				if err != nil {
					return nil, fmt.Errorf("error parsing loadBalancingConfig for policy %q: %v", name, err)
				}
				sc.lbConfig = c
			}
			return sc, nil
		}
	}
	return sc, nil
}
