// Binary client is the gRPC interop client running on leangrpc.
//
// It accepts the flags of grpc-go's interop client (interop/client in
// google.golang.org/grpc), connects with leangrpc.NewClient, and runs the test
// cases with grpc-go's own interop.Do... functions, so the checks are code
// written outside this project. Where grpc-go's function needs a concrete
// *grpc.ClientConn (unimplemented_method, and the soak tests, whose config
// builds channels of that type), the case is written here following the
// interop test descriptions.
//
// Exit status is 0 when the case passed and non-zero otherwise; the failing
// check is printed on stderr.
//
// Plaintext, or TLS with -use_tls as in grpc-go's client: -use_test_ca
// trusts grpc-go's test CA (testdata/ca.pem, or -ca_file) instead of the
// system roots, and -server_host_override names the server the certificate
// must be valid for. ALTS and the cases that need call credentials are not
// supported.
//
// Built with the grpcgo_transport tag, the same program runs on grpc-go's
// transport instead; the interop test suite uses that build to check this
// program's own logic independently of leangrpc.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/testdata"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

var (
	serverHost = flag.String("server_host", "localhost", "The server host name")
	serverPort = flag.Int("server_port", 10000, "The server port number")
	testCase   = flag.String("test_case", "large_unary", "The test case to run: "+strings.Join(caseNames(), ", "))

	useTLS             = flag.Bool("use_tls", false, "Connection uses TLS if true")
	useTestCA          = flag.Bool("use_test_ca", false, "Whether to replace platform root CAs with test CA as the CA root")
	caFile             = flag.String("ca_file", "", "The file containing the CA root cert file; with -use_test_ca, empty means grpc-go's testdata/ca.pem")
	tlsServerName      = flag.String("server_host_override", "", "The server name used to verify the hostname returned by TLS handshake if it is not empty. Otherwise, --server_host is used.")
	additionalMetadata = flag.String("additional_metadata", "", "Additional metadata to send in each request, as a semicolon-separated list of key:value pairs")

	soakIterations            = flag.Int("soak_iterations", 10, "Iterations of rpc_soak and channel_soak")
	soakMaxFailures           = flag.Int("soak_max_failures", 0, "Iterations of a soak test that may fail (non-OK status or latency above the limit)")
	soakMaxLatencyMs          = flag.Int("soak_per_iteration_max_acceptable_latency_ms", 1000, "Latency limit of one soak iteration, in milliseconds")
	soakOverallTimeoutSeconds = flag.Int("soak_overall_timeout_seconds", 10, "Time after which a soak test stops and fails if its iterations have not all run")
	soakMinTimeMsBetweenRPCs  = flag.Int("soak_min_time_ms_between_rpcs", 0, "Minimum time between the starts of consecutive soak RPCs of one worker, in milliseconds")
	soakRequestSize           = flag.Int("soak_request_size", 271828, "Request payload size of a soak RPC")
	soakResponseSize          = flag.Int("soak_response_size", 314159, "Response payload size of a soak RPC")
	soakNumThreads            = flag.Int("soak_num_threads", 1, "Concurrent workers of a soak test; soak_iterations must be a multiple of it")
)

// Flags of grpc-go's interop client that this client accepts so that the
// same command lines work, and ignores. Those that would change what the
// case means are rejected in checkIgnored when set.
var (
	useALTS               = flag.Bool("use_alts", false, "Not supported: must be false")
	_                     = flag.String("alts_handshaker_service_address", "", "Ignored: ALTS is not supported")
	_                     = flag.String("service_account_key_file", "", "Ignored: call credentials are not supported yet")
	_                     = flag.String("oauth_scope", "", "Ignored: call credentials are not supported yet")
	_                     = flag.String("default_service_account", "", "Ignored: call credentials are not supported yet")
	_                     = flag.String("google_c2p_universe_domain", "", "Ignored: xDS is not supported")
	customCredentialsType = flag.String("custom_credentials_type", "", "Not supported: must be empty")
	serviceConfigJSON     = flag.String("service_config_json", "", "Ignored: service config is not supported yet")
)

// cases maps each supported test case name to its implementation. It is the
// 16 plaintext cases of the interop test descriptions.
var cases = map[string]func(ctx context.Context, cc grpc.ClientConnInterface, target string, dial dialFunc) error{
	"empty_unary":                 wrap(interop.DoEmptyUnaryCall),
	"large_unary":                 wrap(interop.DoLargeUnaryCall),
	"client_streaming":            wrap(interop.DoClientStreaming),
	"server_streaming":            wrap(interop.DoServerStreaming),
	"ping_pong":                   wrap(interop.DoPingPong),
	"empty_stream":                wrap(interop.DoEmptyStream),
	"timeout_on_sleeping_server":  wrap(interop.DoTimeoutOnSleepingServer),
	"cancel_after_begin":          wrap(interop.DoCancelAfterBegin),
	"cancel_after_first_response": wrap(interop.DoCancelAfterFirstResponse),
	"status_code_and_message":     wrap(interop.DoStatusCodeAndMessage),
	"special_status_message":      wrap(interop.DoSpecialStatusMessage),
	"custom_metadata":             wrap(interop.DoCustomMetadata),
	"unimplemented_method":        doUnimplementedMethod,
	"unimplemented_service": func(ctx context.Context, cc grpc.ClientConnInterface, _ string, _ dialFunc) error {
		interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(cc))
		return nil
	},
	"rpc_soak": func(ctx context.Context, cc grpc.ClientConnInterface, target string, _ dialFunc) error {
		return doSoak(ctx, soakConfigFromFlags(target), func() (grpc.ClientConnInterface, func(), error) {
			return cc, func() {}, nil
		})
	},
	"channel_soak": func(ctx context.Context, _ grpc.ClientConnInterface, target string, connect dialFunc) error {
		return doSoak(ctx, soakConfigFromFlags(target), func() (grpc.ClientConnInterface, func(), error) {
			c, err := connect(target)
			if err != nil {
				return nil, nil, err
			}
			return c, func() { c.Close() }, nil
		})
	},
}

// wrap adapts one of grpc-go's interop.Do functions, which exit the process
// through grpclog's Fatal when a check fails, to the shape of cases.
func wrap(do func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption)) func(context.Context, grpc.ClientConnInterface, string, dialFunc) error {
	return func(ctx context.Context, cc grpc.ClientConnInterface, _ string, _ dialFunc) error {
		do(ctx, testgrpc.NewTestServiceClient(cc))
		return nil
	}
}

func caseNames() []string {
	names := []string{
		"empty_unary", "large_unary", "client_streaming", "server_streaming",
		"ping_pong", "empty_stream", "timeout_on_sleeping_server",
		"cancel_after_begin", "cancel_after_first_response",
		"status_code_and_message", "special_status_message", "custom_metadata",
		"unimplemented_method", "unimplemented_service", "rpc_soak", "channel_soak",
	}
	return names
}

func main() {
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("interop client (" + transportName + "): ")
	if err := run(); err != nil {
		log.Printf("test case %q FAILED: %v", *testCase, err)
		os.Exit(1)
	}
	log.Printf("test case %q passed", *testCase)
}

func run() error {
	if err := checkFlags(); err != nil {
		return err
	}
	do, ok := cases[*testCase]
	if !ok {
		return fmt.Errorf("unsupported test case %q; supported: %s", *testCase, strings.Join(caseNames(), ", "))
	}
	target := *serverHost
	if *serverPort != 0 {
		target = net.JoinHostPort(*serverHost, strconv.Itoa(*serverPort))
	}
	creds, err := transportCredentials()
	if err != nil {
		return err
	}
	connect := func(target string) (clientConn, error) { return dial(target, creds) }
	cc, err := connect(target)
	if err != nil {
		return fmt.Errorf("%s NewClient(%q): %w", transportName, target, err)
	}
	defer cc.Close()
	var conn grpc.ClientConnInterface = cc
	if *additionalMetadata != "" {
		md, err := parseAdditionalMetadata(*additionalMetadata)
		if err != nil {
			return err
		}
		conn = &metadataConn{ClientConnInterface: cc, md: md}
	}
	return do(context.Background(), conn, target, connect)
}

// transportCredentials returns the credentials the flags ask for, built as
// grpc-go's interop client builds them.
func transportCredentials() (credentials.TransportCredentials, error) {
	if !*useTLS {
		return insecure.NewCredentials(), nil
	}
	var roots *x509.CertPool // nil: the system's roots
	if *useTestCA {
		file := *caFile
		if file == "" {
			file = testdata.Path("ca.pem")
		}
		pem, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading the root certificate file: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", file)
		}
	}
	if *tlsServerName != "" {
		return credentials.NewClientTLSFromCert(roots, *tlsServerName), nil
	}
	return credentials.NewTLS(&tls.Config{RootCAs: roots}), nil
}

// checkFlags rejects the flag values this client cannot honour, rather than
// running a different test than the one asked for.
func checkFlags() error {
	if *useALTS {
		return fmt.Errorf("-use_alts=true: ALTS is not supported by this client")
	}
	if *customCredentialsType != "" {
		return fmt.Errorf("-custom_credentials_type=%q: not supported", *customCredentialsType)
	}
	if *serviceConfigJSON != "" {
		log.Printf("ignoring -service_config_json: service config is not supported yet")
	}
	return nil
}

// clientConn is what dial returns: a leangrpc.ClientConn, or a
// grpc.ClientConn when built with the grpcgo_transport tag.
type clientConn interface {
	grpc.ClientConnInterface
	Close() error
}

// dialFunc creates a client connection to target with the credentials the
// flags asked for; channel_soak makes one per iteration.
type dialFunc func(target string) (clientConn, error)

// doUnimplementedMethod calls a method that TestService does not implement
// and expects Unimplemented. grpc-go's DoUnimplementedMethod takes a
// *grpc.ClientConn, so this is the same check over any ClientConnInterface.
func doUnimplementedMethod(ctx context.Context, cc grpc.ClientConnInterface, _ string, _ dialFunc) error {
	err := cc.Invoke(ctx, "/grpc.testing.TestService/UnimplementedCall", &testpb.Empty{}, &testpb.Empty{})
	if err == nil {
		return fmt.Errorf("Invoke(UnimplementedCall) succeeded, want code %v", codes.Unimplemented)
	}
	if got := status.Code(err); got != codes.Unimplemented {
		return fmt.Errorf("Invoke(UnimplementedCall) = %v (code %v), want code %v", err, got, codes.Unimplemented)
	}
	return nil
}

// parseAdditionalMetadata parses "k1:v1;k2:v2" into metadata pairs. Values
// may contain colons but not semicolons, as in grpc-go's client.
func parseAdditionalMetadata(s string) ([]string, error) {
	var kv []string
	for _, item := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("-additional_metadata: %q has no ':' separator", item)
		}
		kv = append(kv, k, v)
	}
	return kv, nil
}

// metadataConn adds fixed metadata to every RPC made through it; it is how
// -additional_metadata is applied without depending on interceptor options.
type metadataConn struct {
	grpc.ClientConnInterface
	md []string // key, value, key, value...; read-only after construction
}

func (c *metadataConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConnInterface.Invoke(metadata.AppendToOutgoingContext(ctx, c.md...), method, args, reply, opts...)
}

func (c *metadataConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.ClientConnInterface.NewStream(metadata.AppendToOutgoingContext(ctx, c.md...), desc, method, opts...)
}

// soakConfig is the configuration of rpc_soak and channel_soak, with the
// meaning of grpc-go's interop.SoakTestConfig.
type soakConfig struct {
	requestSize, responseSize int
	maxLatency                time.Duration // per iteration; slower counts as a failure
	minTimeBetweenRPCs        time.Duration // per worker, start to start
	overallTimeout            time.Duration
	target                    string
	workers                   int
	iterations                int // in total, split evenly among workers
	maxFailures               int
}

func soakConfigFromFlags(target string) soakConfig {
	return soakConfig{
		requestSize:        *soakRequestSize,
		responseSize:       *soakResponseSize,
		maxLatency:         time.Duration(*soakMaxLatencyMs) * time.Millisecond,
		minTimeBetweenRPCs: time.Duration(*soakMinTimeMsBetweenRPCs) * time.Millisecond,
		overallTimeout:     time.Duration(*soakOverallTimeoutSeconds) * time.Second,
		target:             target,
		workers:            *soakNumThreads,
		iterations:         *soakIterations,
		maxFailures:        *soakMaxFailures,
	}
}
