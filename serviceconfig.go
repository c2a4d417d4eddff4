package leangrpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/serviceconfig"
)

// A service config (gRFC A2, A6) chooses the load-balancing policy and
// sets per-method timeouts, wait-for-ready, message size limits and retry
// policies. parseServiceConfig accepts and refuses the same JSON as
// grpc-go's parser, with the same error texts where code may show them
// (NewClient's error for an invalid WithDefaultServiceConfig).

// defaultMaxCallAttempts caps a retry policy's maxAttempts unless
// WithMaxCallAttempts says otherwise, as in grpc-go.
const defaultMaxCallAttempts = 5

// defaultRetryBufferSize is how many bytes of request messages a call
// keeps for replay on a retry unless grpc.MaxRetryRPCBufferSize says
// otherwise (grpc-go's default).
const defaultRetryBufferSize = 256 << 10

// serviceConfig is a parsed service config. It is immutable once parsed,
// except for the retry throttler's tokens, and belongs to one ClientConn:
// the throttler it carries is that ClientConn's (grpc-go makes a throttler
// each time a config is applied).
type serviceConfig struct {
	serviceconfig.Config // grpc-go requires implementations to embed it

	// lbName is the load-balancing policy the config chooses (its
	// builder's name in grpc-go's registry), "" when it names none that is
	// registered; lbConfig is the policy's config as its builder's
	// balancer.ConfigParser parsed it, nil when the builder has no parser
	// or lbName is "".
	lbName   string
	lbConfig serviceconfig.LoadBalancingConfig
	// healthCheckService is healthCheckConfig.serviceName, nil when the
	// config has no healthCheckConfig.
	healthCheckService *string
	// methods maps "/service/method", "/service/" and "" (every method)
	// to their method config; the names of one entry share a pointer.
	methods map[string]*methodConfig
	// throttler is the retryThrottling token bucket, nil without one.
	throttler *retryThrottler
}

// methodConfig is one methodConfig entry; a nil field is absent.
type methodConfig struct {
	waitForReady *bool
	timeout      *time.Duration
	maxReqSize   *int
	maxRespSize  *int
	retry        *retryPolicy
}

// retryPolicy is a validated retryPolicy (gRFC A6).
type retryPolicy struct {
	maxAttempts    int // at least 2, capped by WithMaxCallAttempts
	initialBackoff time.Duration
	maxBackoff     time.Duration
	multiplier     float64
	codes          uint32 // bit c set: codes.Code(c) is retryable
}

func (p *retryPolicy) retryable(c codes.Code) bool {
	return c < 32 && p.codes&(1<<c) != 0
}

// methodConfig returns the method config of fullMethod ("/service/method"):
// the method's own, else its service's, else the default one, nil when
// there is none. It allocates nothing.
func (sc *serviceConfig) methodConfig(fullMethod string) *methodConfig {
	if len(sc.methods) == 0 {
		return nil
	}
	if mc, ok := sc.methods[fullMethod]; ok {
		return mc
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i >= 0 {
		if mc, ok := sc.methods[fullMethod[:i+1]]; ok {
			return mc
		}
	}
	return sc.methods[""]
}

// The JSON shapes below have grpc-go's type and field names: encoding/json
// matches keys to field names without regard to case and names the type
// and field in its errors, so the same names give the same acceptance and
// the same error texts.

type jsonSC struct {
	LoadBalancingPolicy *string
	LoadBalancingConfig *json.RawMessage
	MethodConfig        *[]jsonMC
	RetryThrottling     *retryThrottlingPolicy
	HealthCheckConfig   *healthCheckConfig
}

type jsonMC struct {
	Name                    *[]jsonName
	WaitForReady            *bool
	Timeout                 *jsonDuration
	MaxRequestMessageBytes  *int64
	MaxResponseMessageBytes *int64
	RetryPolicy             *jsonRetryPolicy
}

type jsonName struct {
	Service string
	Method  string
}

type jsonRetryPolicy struct {
	MaxAttempts          int
	InitialBackoff       jsonDuration
	MaxBackoff           jsonDuration
	BackoffMultiplier    float64
	RetryableStatusCodes []codes.Code
}

type retryThrottlingPolicy struct {
	MaxTokens  float64
	TokenRatio float64
}

type healthCheckConfig struct {
	ServiceName string
}

var (
	errDuplicatedName             = errors.New("duplicated name")
	errEmptyServiceNonEmptyMethod = errors.New("cannot combine empty 'service' and non-empty 'method'")
)

// path is the methods key of a name: "/service/method", "/service/" or
// "" for the default.
func (n jsonName) path() (string, error) {
	if n.Service == "" {
		if n.Method != "" {
			return "", errEmptyServiceNonEmptyMethod
		}
		return "", nil
	}
	return "/" + n.Service + "/" + n.Method, nil
}

// parseServiceConfig parses a service config in JSON; maxAttempts caps
// the retry policies' maxAttempts.
func parseServiceConfig(js string, maxAttempts int) (*serviceConfig, error) {
	if js == "" {
		return nil, errors.New("no JSON service config provided")
	}
	var raw jsonSC
	if err := json.Unmarshal([]byte(js), &raw); err != nil {
		return nil, err
	}
	sc := &serviceConfig{}
	if hc := raw.HealthCheckConfig; hc != nil {
		name := hc.ServiceName
		sc.healthCheckService = &name
	}
	if err := sc.parseLB(&raw); err != nil {
		return nil, err
	}
	if raw.MethodConfig != nil {
		sc.methods = make(map[string]*methodConfig)
		for _, m := range *raw.MethodConfig {
			if m.Name == nil {
				continue // as grpc-go: an entry that names nothing is ignored unchecked
			}
			mc := &methodConfig{waitForReady: m.WaitForReady}
			if m.Timeout != nil {
				d := time.Duration(*m.Timeout)
				mc.timeout = &d
			}
			var err error
			if mc.retry, err = m.RetryPolicy.policy(maxAttempts); err != nil {
				return nil, err
			}
			mc.maxReqSize = clampSize(m.MaxRequestMessageBytes)
			mc.maxRespSize = clampSize(m.MaxResponseMessageBytes)
			for _, n := range *m.Name {
				p, err := n.path()
				if err != nil {
					return nil, err
				}
				if _, dup := sc.methods[p]; dup {
					return nil, errDuplicatedName
				}
				sc.methods[p] = mc
			}
		}
	}
	if t := raw.RetryThrottling; t != nil {
		// grpc-go checks retryThrottling only in a config that has a
		// methodConfig; without one it takes any values as they are.
		if raw.MethodConfig != nil {
			if t.MaxTokens <= 0 || t.MaxTokens > 1000 {
				return nil, fmt.Errorf("invalid retry throttling config: maxTokens (%v) out of range (0, 1000]", t.MaxTokens)
			}
			if t.TokenRatio <= 0 {
				return nil, fmt.Errorf("invalid retry throttling config: tokenRatio (%v) may not be negative", t.TokenRatio)
			}
		}
		sc.throttler = &retryThrottler{tokens: t.MaxTokens, max: t.MaxTokens, thresh: t.MaxTokens / 2, ratio: t.TokenRatio}
	}
	return sc, nil
}

// parseLB chooses the load-balancing policy: the first policy of
// loadBalancingConfig whose builder is registered (an error when none is),
// else loadBalancingPolicy when it is registered, else none.
func (sc *serviceConfig) parseLB(raw *jsonSC) error {
	if raw.LoadBalancingConfig == nil {
		if raw.LoadBalancingPolicy == nil {
			return nil
		}
		b := balancer.Get(*raw.LoadBalancingPolicy)
		if b == nil {
			return nil // grpc-go falls back to its default policy
		}
		return sc.setLB(b, json.RawMessage("{}"))
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(*raw.LoadBalancingConfig, &list); err != nil {
		return err
	}
	for i, e := range list {
		if len(e) != 1 {
			return fmt.Errorf("expected a JSON struct with one entry; received entry %v at index %d", e, i)
		}
		for name, cfg := range e {
			if b := balancer.Get(name); b != nil {
				return sc.setLB(b, cfg)
			}
		}
	}
	return fmt.Errorf("no supported policies found in config: %v", string(*raw.LoadBalancingConfig))
}

func (sc *serviceConfig) setLB(b balancer.Builder, cfg json.RawMessage) error {
	sc.lbName = b.Name()
	if p, ok := b.(balancer.ConfigParser); ok {
		c, err := p.ParseConfig(cfg)
		if err != nil {
			return fmt.Errorf("error parsing config for policy %q: %v", sc.lbName, err)
		}
		sc.lbConfig = c
	}
	return nil
}

// clampSize is a message size limit as an int, capped at the largest int.
func clampSize(n *int64) *int {
	if n == nil {
		return nil
	}
	v := int(min(*n, int64(math.MaxInt)))
	return &v
}

// policy validates p as grpc-go does and converts it; nil for nil.
func (p *jsonRetryPolicy) policy(maxAttempts int) (*retryPolicy, error) {
	if p == nil {
		return nil, nil
	}
	if p.MaxAttempts <= 1 || p.InitialBackoff <= 0 || p.MaxBackoff <= 0 || p.BackoffMultiplier <= 0 || len(p.RetryableStatusCodes) == 0 {
		return nil, fmt.Errorf("invalid retry policy (%+v): ", p)
	}
	rp := &retryPolicy{
		maxAttempts:    min(p.MaxAttempts, maxAttempts),
		initialBackoff: time.Duration(p.InitialBackoff),
		maxBackoff:     time.Duration(p.MaxBackoff),
		multiplier:     p.BackoffMultiplier,
	}
	for _, c := range p.RetryableStatusCodes {
		if c < 32 { // codes.Code's JSON form admits only the 17 codes
			rp.codes |= 1 << c
		}
	}
	return rp, nil
}

// jsonDuration is a google.protobuf.Duration in its JSON form: seconds
// with up to nine decimals and an "s" suffix ("1.5s").
type jsonDuration time.Duration

func (d jsonDuration) String() string { return time.Duration(d).String() }

// maxDurationSeconds is the largest seconds value a protobuf Duration may
// hold (10,000 years).
const maxDurationSeconds = 315_576_000_000

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if !strings.HasSuffix(s, "s") {
		return fmt.Errorf("malformed duration %q: missing seconds unit", s)
	}
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	parts := strings.SplitN(s[:len(s)-1], ".", 3)
	if len(parts) > 2 {
		return fmt.Errorf("malformed duration %q: too many decimals", s)
	}
	digits := false
	var sec, ns int64
	if parts[0] != "" {
		var err error
		if sec, err = strconv.ParseInt(parts[0], 10, 64); err != nil {
			return fmt.Errorf("malformed duration %q: %v", s, err)
		}
		if sec > maxDurationSeconds {
			return fmt.Errorf("out of range: %q", s)
		}
		digits = true
	}
	if len(parts) == 2 && parts[1] != "" {
		frac := parts[1]
		if len(frac) > 9 {
			return fmt.Errorf("malformed duration %q: too many digits after decimal", s)
		}
		var err error
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return fmt.Errorf("malformed duration %q: %v", s, err)
		}
		for range 9 - len(frac) {
			ns *= 10
		}
		digits = true
	}
	if !digits {
		return fmt.Errorf("malformed duration %q: contains no numbers", s)
	}
	if neg {
		sec, ns = -sec, -ns
	}
	// Beyond what time.Duration holds, the duration saturates.
	const maxSec, maxNs = math.MaxInt64 / int64(time.Second), math.MaxInt64 % int64(time.Second)
	const minSec, minNs = math.MinInt64 / int64(time.Second), math.MinInt64 % int64(time.Second)
	switch {
	case sec > maxSec || sec == maxSec && ns >= maxNs:
		*d = jsonDuration(math.MaxInt64)
	case sec < minSec || sec == minSec && ns <= minNs:
		*d = jsonDuration(math.MinInt64)
	default:
		*d = jsonDuration(sec*int64(time.Second) + ns)
	}
	return nil
}

// retryThrottler is a ClientConn's retry token bucket (gRFC A6): each
// failure a retry policy could retry takes a token, each successful call
// gives back tokenRatio of one, and retries stop while at most half the
// tokens are left.
type retryThrottler struct {
	max, thresh, ratio float64

	mu     sync.Mutex
	tokens float64 // guarded by mu
}

// throttle takes a token for a failed attempt and reports whether
// retries are throttled. A nil throttler never throttles.
func (t *retryThrottler) throttle() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tokens = max(t.tokens-1, 0)
	return t.tokens <= t.thresh
}

// success gives back a share of a token for a call that succeeded.
func (t *retryThrottler) success() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.tokens = min(t.tokens+t.ratio, t.max)
	t.mu.Unlock()
}
