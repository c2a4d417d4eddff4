package leangrpc

// The dial options of service config and retries (serviceconfig.go,
// retry.go), as grpc-go has them.

// WithDefaultServiceConfig sets the service config (JSON, gRFC A2) used
// when the resolver gives none or WithDisableServiceConfig is set. NewClient
// fails when it does not parse, with grpc-go's error text.
func WithDefaultServiceConfig(js string) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.defaultServiceConfig = &js })
}

// WithDisableServiceConfig ignores the service configs resolvers give;
// the one of WithDefaultServiceConfig, if any, still applies.
func WithDisableServiceConfig() DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.disableServiceConfig = true })
}

// WithDisableRetry turns off the retries of service config retry policies.
// As in grpc-go, a call the server never processed (a refused stream, or
// one above a GOAWAY's last stream id) is still retried transparently.
func WithDisableRetry() DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.disableRetry = true })
}

// WithMaxCallAttempts caps the attempts of a call, retries included
// (default 5): a retry policy asking for more gets n. Values under 2 mean
// the default, as in grpc-go.
func WithMaxCallAttempts(n int) DialOption {
	return dialOptionFunc(func(o *dialOptions) {
		if n < 2 {
			n = defaultMaxCallAttempts
		}
		o.maxCallAttempts = n
	})
}
