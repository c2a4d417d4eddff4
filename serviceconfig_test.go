package leangrpc_test

import (
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// validServiceConfigs and invalidServiceConfigs are service configs that
// leangrpc's parser must judge as grpc-go's does.
var validServiceConfigs = []string{
	`{}`,
	`{"loadBalancingPolicy": "round_robin"}`,
	`{"loadBalancingPolicy": "no_such_policy"}`,
	`{"loadBalancingConfig": [{"round_robin": {}}]}`,
	`{"loadBalancingConfig": [{"no_such_policy": {}}, {"pick_first": {"shuffleAddressList": true}}]}`,
	`{"loadBalancingConfig": null, "methodConfig": null}`,
	`{"healthCheckConfig": {"serviceName": "svc"}}`,
	`{"methodConfig": [{"name": [{"service": "a.S", "method": "M"}, {"service": "a.T"}, {}],
		"timeout": "1.5s", "waitForReady": true, "maxRequestMessageBytes": 1024, "maxResponseMessageBytes": 9223372036854775807,
		"retryPolicy": {"maxAttempts": 4, "initialBackoff": ".1s", "maxBackoff": "1s", "backoffMultiplier": 1.5,
			"retryableStatusCodes": ["UNAVAILABLE", 4]}}]}`,
	`{"methodConfig": [{"retryPolicy": {"maxAttempts": 1}}]}`, // no name: ignored, unchecked
	`{"MethodConfig": [{"NAME": [{"Service": "a.S"}], "Timeout": "-3s"}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "timeout": "315576000000.999999999s"}]}`,
	`{"retryThrottling": {"maxTokens": 1000, "tokenRatio": 0.001}}`,
	`{"unknownField": [1, 2, 3]}`,
	// grpc-go checks retryThrottling only beside a methodConfig.
	`{"retryThrottling": {"maxTokens": 0, "tokenRatio": -1}}`,
}

var invalidServiceConfigs = []string{
	``,
	`not json`,
	`[]`,
	`{"loadBalancingPolicy": 3}`,
	`{"loadBalancingConfig": [{"no_such_policy": {}}]}`,
	`{"loadBalancingConfig": []}`,
	`{"loadBalancingConfig": [{"round_robin": {}, "pick_first": {}}]}`,
	`{"loadBalancingConfig": {"round_robin": {}}}`,
	`{"loadBalancingConfig": [{"pick_first": {"shuffleAddressList": "yes"}}]}`,
	`{"healthCheckConfig": {"serviceName": 1}}`,
	`{"methodConfig": [{"name": [{"method": "M"}]}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}]}, {"name": [{"service": "a.S"}]}]}`,
	`{"methodConfig": [{"name": [{}, {}]}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "timeout": "1"}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "timeout": 1}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "timeout": "1.2.3s"}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "timeout": "1.1234567891s"}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "timeout": "-s"}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "timeout": "xs"}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "timeout": "315576000001s"}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "waitForReady": "yes"}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "maxRequestMessageBytes": "big"}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "maxResponseMessageBytes": 1.5}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 1, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 0, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": []}}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["NOPE"]}}]}`,
	`{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": [17]}}]}`,
	`{"methodConfig": [], "retryThrottling": {"maxTokens": 0, "tokenRatio": 1}}`,
	`{"methodConfig": [], "retryThrottling": {"maxTokens": 1001, "tokenRatio": 1}}`,
	`{"methodConfig": [], "retryThrottling": {"maxTokens": 10, "tokenRatio": 0}}`,
	`{"methodConfig": [], "retryThrottling": {"maxTokens": 10}}`,
}

// NewClient with WithDefaultServiceConfig accepts the configs grpc-go's
// NewClient accepts and refuses the others with the same error text.
func TestDefaultServiceConfigMatchesGRPC(t *testing.T) {
	for i, js := range append(validServiceConfigs, invalidServiceConfigs...) {
		lc, lerr := leangrpc.NewClient("passthrough:///localhost:1", leangrpc.WithDefaultServiceConfig(js))
		if lc != nil {
			lc.Close()
		}
		gc, gerr := grpc.NewClient("passthrough:///localhost:1", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(js))
		if gc != nil {
			gc.Close()
		}
		if valid := i < len(validServiceConfigs); (lerr == nil) != valid {
			t.Errorf("%s: NewClient: %v, want valid=%v", js, lerr, valid)
		}
		if (lerr == nil) != (gerr == nil) {
			t.Errorf("%s:\n  leangrpc: %v\n  grpc-go:  %v", js, lerr, gerr)
			continue
		}
		// encoding/json names the package of the type it could not fill:
		// leangrpc's where grpc-go's says grpc.
		if lerr != nil && strings.ReplaceAll(lerr.Error(), "leangrpc.", "grpc.") != gerr.Error() {
			t.Errorf("%s: error texts differ:\n  leangrpc: %v\n  grpc-go:  %v", js, lerr, gerr)
		}
	}
}
