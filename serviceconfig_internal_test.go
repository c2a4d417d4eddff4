package leangrpc

import (
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// The parsed config carries what the balancer, health checking and calls
// read from it.
func TestParseServiceConfigFields(t *testing.T) {
	for _, c := range []struct {
		js     string
		lbName string
		lbCfg  bool
	}{
		{`{}`, "", false},
		{`{"loadBalancingPolicy": "round_robin"}`, "round_robin", false},
		{`{"loadBalancingPolicy": "no_such_policy"}`, "", false},
		{`{"loadBalancingPolicy": "pick_first"}`, "pick_first", true},
		{`{"loadBalancingConfig": [{"no_such_policy": {}}, {"pick_first": {"shuffleAddressList": true}}], "loadBalancingPolicy": "round_robin"}`, "pick_first", true},
	} {
		sc, err := parseServiceConfig(c.js, defaultMaxCallAttempts)
		if err != nil {
			t.Fatalf("%s: %v", c.js, err)
		}
		if sc.lbName != c.lbName || (sc.lbConfig != nil) != c.lbCfg {
			t.Errorf("%s: lbName %q, lbConfig %v; want %q, config %v", c.js, sc.lbName, sc.lbConfig, c.lbName, c.lbCfg)
		}
		if sc.healthCheckService != nil || sc.throttler != nil || sc.methodConfig("/a.S/M") != nil {
			t.Errorf("%s: health check, throttling or method config where none was given", c.js)
		}
	}

	sc, err := parseServiceConfig(`{"healthCheckConfig": {"serviceName": ""},
		"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.5},
		"methodConfig": [
			{"name": [{"service": "a.S", "method": "M"}, {"service": "a.T"}], "timeout": "1.5s", "waitForReady": false,
			 "maxRequestMessageBytes": 10, "maxResponseMessageBytes": 9223372036854775807,
			 "retryPolicy": {"maxAttempts": 4, "initialBackoff": ".1s", "maxBackoff": "2s", "backoffMultiplier": 3,
				"retryableStatusCodes": ["UNAVAILABLE", 4]}},
			{"name": [{"service": "a.S"}], "waitForReady": true},
			{"name": [{}], "timeout": "-0.000000001s"}]}`, 3)
	if err != nil {
		t.Fatal(err)
	}
	if sc.healthCheckService == nil || *sc.healthCheckService != "" {
		t.Errorf("healthCheckService %v, want a pointer to \"\"", sc.healthCheckService)
	}
	m := sc.methodConfig("/a.S/M")
	if m == nil || *m.timeout != 1500*time.Millisecond || *m.waitForReady || *m.maxReqSize != 10 || *m.maxRespSize != math.MaxInt {
		t.Fatalf("/a.S/M: %+v", m)
	}
	rp := m.retry
	if rp.maxAttempts != 3 || rp.initialBackoff != 100*time.Millisecond || rp.maxBackoff != 2*time.Second || rp.multiplier != 3 {
		t.Errorf("retry policy %+v: want maxAttempts capped at 3", rp)
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if want := c == codes.Unavailable || c == codes.DeadlineExceeded; rp.retryable(c) != want {
			t.Errorf("retryable(%v) = %v", c, !want)
		}
	}
	if sc.methodConfig("/a.T/X") != m {
		t.Error("/a.T/X does not get its service's config")
	}
	if s := sc.methodConfig("/a.S/N"); s == nil || !*s.waitForReady || s.timeout != nil {
		t.Errorf("/a.S/N: %+v, want a.S's own config", s)
	}
	if d := sc.methodConfig("/b.S/M"); d == nil || *d.timeout != -time.Nanosecond {
		t.Errorf("/b.S/M: %+v, want the default config", d)
	}
	if n := testing.AllocsPerRun(100, func() { sc.methodConfig("/a.S/N") }); n != 0 {
		t.Errorf("methodConfig allocates %v times", n)
	}
	th := sc.throttler
	if th == nil || th.tokens != 10 || th.thresh != 5 {
		t.Fatalf("throttler %+v", th)
	}
	for range 4 {
		if th.throttle() {
			t.Fatal("throttled above half the tokens")
		}
	}
	if !th.throttle() {
		t.Error("not throttled at half the tokens")
	}
	for range 3 { // 5 + 3×0.5 = 6.5 tokens; a failure leaves 5.5
		th.success()
	}
	if th.throttle() {
		t.Error("throttled after successes gave a token back")
	}
}

func TestJSONDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{`"1s"`, time.Second}, {`".5s"`, 500 * time.Millisecond}, {`"1.s"`, time.Second},
		{`"0.000000001s"`, time.Nanosecond}, {`"-1.25s"`, -1250 * time.Millisecond},
		{`"315576000000s"`, math.MaxInt64}, {`"-315576000000s"`, math.MinInt64},
	} {
		var d jsonDuration
		if err := d.UnmarshalJSON([]byte(c.in)); err != nil || time.Duration(d) != c.want {
			t.Errorf("%s: %v, %v; want %v", c.in, time.Duration(d), err, c.want)
		}
	}
	for _, in := range []string{`1`, `""`, `"s"`, `"1"`, `".s"`, `"1.2.3s"`, `"1.0000000001s"`, `"+s"`, `"1e3s"`, `"315576000001s"`} {
		var d jsonDuration
		if err := d.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("%s: parsed as %v, want an error", in, time.Duration(d))
		}
	}
}
