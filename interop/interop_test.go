// Package interop_test runs the gRPC interop test cases between grpc-go's
// interop programs and leangrpc's (interop/client, interop/server), each
// case a separate client process against a server process on loopback.
//
// Directions, as subtests TestInterop/<client>_to_<server>/<case> over
// plaintext and TestInterop/tls/<client>_to_<server>/<case> over TLS
// (grpc-go's test certificate and CA, as its interop programs default to):
//   - grpcgo_to_grpcgo: grpc-go's binaries on both sides. It validates the
//     harness and always runs.
//   - shim_to_shim: this project's programs built with the grpcgo_transport
//     tag, so on grpc-go's transport. It validates the programs' own logic
//     (the cases written here rather than taken from grpc-go) and always runs.
//   - grpcgo_to_lean, lean_to_grpcgo, lean_to_lean: the real thing.
//
// grpc-go's binaries are built with `go install <pkg>@<version>`, the version
// being the one go.mod requires, because their dependencies (ALTS, xDS) are
// not in this module's go.sum.
//
// Run:
//
//	go test ./interop/ -p 1 -v
//	go test ./interop/ -run 'TestInterop/lean_to_lean' -v
//
// LEANGRPC_INTEROP_RACE=1 builds this project's programs with -race, so a
// data race in leangrpc fails the case that ran into it.
package interop_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/testdata"
)

const (
	caseTimeout = 60 * time.Second // one client process
	// directionTimeouts is how many cases of one direction may time out
	// before the rest are failed without running, so that a hanging
	// transport costs minutes, not caseTimeout x 16.
	directionTimeouts = 2
	serverStartup     = 20 * time.Second
	grpcModule        = "google.golang.org/grpc"
)

// The 16 plaintext cases of gRPC's interop test descriptions.
var testCases = []string{
	"empty_unary",
	"large_unary",
	"client_streaming",
	"server_streaming",
	"ping_pong",
	"empty_stream",
	"timeout_on_sleeping_server",
	"cancel_after_begin",
	"cancel_after_first_response",
	"status_code_and_message",
	"special_status_message",
	"custom_metadata",
	"unimplemented_method",
	"unimplemented_service",
	"rpc_soak",
	"channel_soak",
}

// clientArgs are passed to every client besides host, port, case and the
// security's flags. The soak latency limit is generous because the test
// machine is shared; the interop suite checks behaviour, not speed.
var clientArgs = []string{
	"-soak_iterations=10",
	"-soak_max_failures=0",
	"-soak_per_iteration_max_acceptable_latency_ms=20000",
	"-soak_overall_timeout_seconds=50",
}

// binDir holds the binaries built for this run; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leangrpc-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// program is a client or server binary, built at most once per run.
type program struct {
	name  string // file name in binDir
	build func(out string) ([]byte, error)

	once sync.Once
	path string
	err  error
}

func (p *program) get(t *testing.T) string {
	t.Helper()
	p.once.Do(func() {
		out := filepath.Join(binDir, p.name)
		start := time.Now()
		var log []byte
		log, p.err = p.build(out)
		if p.err != nil {
			p.err = fmt.Errorf("building %s: %v\n%s", p.name, p.err, log)
			return
		}
		p.path = out
		t.Logf("built %s in %v", p.name, time.Since(start).Round(time.Millisecond))
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.path
}

// goBuild builds one of this module's main packages with tags added to
// the test binary's own build tags, so that a suite run with
// -tags leangrpcportable runs the programs through the portable path too.
func goBuild(pkg string, tags ...string) func(string) ([]byte, error) {
	return func(out string) ([]byte, error) {
		args := []string{"build", "-o", out}
		if os.Getenv("LEANGRPC_INTEROP_RACE") == "1" {
			args = append(args, "-race")
		}
		tags = append(ownBuildTags(), tags...)
		if len(tags) > 0 {
			args = append(args, "-tags", strings.Join(tags, ","))
		}
		return exec.Command("go", append(args, pkg)...).CombinedOutput()
	}
}

// ownBuildTags returns the -tags the test binary was built with.
func ownBuildTags() []string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	for _, s := range bi.Settings {
		if s.Key == "-tags" && s.Value != "" {
			return strings.Split(s.Value, ",")
		}
	}
	return nil
}

// grpcGoInstall builds one of grpc-go's main packages at the version this
// module requires, outside this module (its go.sum lacks their deps).
func grpcGoInstall(pkg string) func(string) ([]byte, error) {
	return func(out string) ([]byte, error) {
		ver, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", grpcModule).Output()
		if err != nil {
			return nil, fmt.Errorf("go list -m %s: %v", grpcModule, err)
		}
		gobin, err := os.MkdirTemp(binDir, "gobin-")
		if err != nil {
			return nil, err
		}
		cmd := exec.Command("go", "install", pkg+"@"+strings.TrimSpace(string(ver)))
		cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=")
		cmd.Dir = gobin // outside this module
		if log, err := cmd.CombinedOutput(); err != nil {
			return log, err
		}
		return nil, os.Rename(filepath.Join(gobin, filepath.Base(pkg)), out)
	}
}

var (
	grpcGoServer = &program{name: "grpcgo-server", build: grpcGoInstall(grpcModule + "/interop/server")}
	grpcGoClient = &program{name: "grpcgo-client", build: grpcGoInstall(grpcModule + "/interop/client")}
	leanServer   = &program{name: "lean-server", build: goBuild("github.com/leangrpc/leangrpc/interop/server")}
	leanClient   = &program{name: "lean-client", build: goBuild("github.com/leangrpc/leangrpc/interop/client")}
	shimServer   = &program{name: "shim-server", build: goBuild("github.com/leangrpc/leangrpc/interop/server", "grpcgo_transport")}
	shimClient   = &program{name: "shim-client", build: goBuild("github.com/leangrpc/leangrpc/interop/client", "grpcgo_transport")}
)

// security is how the connections of a run are protected: the flags of
// grpc-go's interop server and client that choose it.
type security struct {
	serverArgs, clientArgs []string
}

var (
	plaintext = security{
		serverArgs: []string{"-use_tls=false"},
		clientArgs: []string{"-use_tls=false"},
	}
	// tlsTestCA is TLS with grpc-go's defaults: the server presents
	// testdata/server1.pem, issued by testdata/ca.pem for *.test.google.fr,
	// which the client trusts and checks the certificate against.
	tlsTestCA = security{
		serverArgs: []string{"-use_tls=true"},
		clientArgs: []string{"-use_tls=true", "-use_test_ca=true", "-server_host_override=foo.test.google.fr"},
	}
)

type direction struct {
	name           string
	client, server *program
}

var directions = []direction{
	{"grpcgo_to_grpcgo", grpcGoClient, grpcGoServer},
	{"shim_to_shim", shimClient, shimServer},
	{"grpcgo_to_lean", grpcGoClient, leanServer},
	{"lean_to_grpcgo", leanClient, grpcGoServer},
	{"lean_to_lean", leanClient, leanServer},
}

func TestInterop(t *testing.T) {
	runDirections(t, plaintext)
	// Over TLS every direction runs again: grpc-go's pair checks the
	// flags and certificates, the shims our programs' TLS set-up.
	t.Run("tls", func(t *testing.T) { runDirections(t, tlsTestCA) })
}

// runDirections runs every case in every direction, as subtests
// <client>_to_<server>/<case> of t.
func runDirections(t *testing.T, sec security) {
	for _, d := range directions {
		t.Run(d.name, func(t *testing.T) {
			clientBin := d.client.get(t)
			srv := startServer(t, d.server.get(t), sec.serverArgs...)
			timeouts := 0
			for _, tc := range testCases {
				t.Run(tc, func(t *testing.T) {
					if timeouts >= directionTimeouts {
						t.Fatalf("not run: %d earlier cases of %s timed out", timeouts, d.name)
					}
					srv.ensureRunning(t)
					mark := srv.out.Len()
					out, err := runClient(clientBin, srv.port, tc, sec.clientArgs...)
					if err == nil {
						return
					}
					if errors.Is(err, context.DeadlineExceeded) {
						timeouts++
					}
					t.Errorf("%s client, case %s: %v\n--- client output:\n%s\n--- server output during the case:\n%s",
						d.name, tc, err, tail(out), tail(srv.out.From(mark)))
				})
			}
		})
	}
}

// TestInteropTLSIsChecked checks that the TLS runs are what they claim: a
// client that does not trust the test CA, one that expects another server
// name, and one speaking plaintext all fail against a TLS server, with
// each client program against each server program.
func TestInteropTLSIsChecked(t *testing.T) {
	wrong := []struct {
		name string
		args []string
		want string // in the client's output; "" for any failure
	}{
		{"system_roots", []string{"-use_tls=true", "-server_host_override=foo.test.google.fr"}, "certificate signed by unknown authority"},
		{"wrong_name", []string{"-use_tls=true", "-use_test_ca=true", "-server_host_override=foo.example.com"}, "not foo.example.com"},
		{"plaintext", []string{"-use_tls=false"}, ""},
	}
	for _, server := range []*program{leanServer, grpcGoServer} {
		srv := startServer(t, server.get(t), tlsTestCA.serverArgs...)
		for _, client := range []*program{leanClient, grpcGoClient} {
			for _, w := range wrong {
				t.Run(client.name+"_to_"+server.name+"/"+w.name, func(t *testing.T) {
					out, err := runClient(client.get(t), srv.port, "empty_unary", w.args...)
					if err == nil {
						t.Fatalf("client with %v against a TLS server succeeded; output:\n%s", w.args, out)
					}
					if !bytes.Contains(out, []byte(w.want)) {
						t.Errorf("client with %v failed (%v) without saying %q:\n%s", w.args, err, w.want, tail(out))
					}
				})
			}
		}
	}
}

// TestInteropTLSFiles checks the file flags: each server program presents
// another certificate (-tls_cert_file, -tls_key_file), which each client
// program accepts when -ca_file names its CA under -use_test_ca; without
// -use_test_ca the file is not used, as in grpc-go, and the call fails.
func TestInteropTLSFiles(t *testing.T) {
	serverArgs := []string{"-use_tls=true",
		"-tls_cert_file=" + testdata.Path("x509/server1_cert.pem"),
		"-tls_key_file=" + testdata.Path("x509/server1_key.pem")}
	withCA := []string{"-use_tls=true", "-use_test_ca=true",
		"-ca_file=" + testdata.Path("x509/server_ca_cert.pem"), "-server_host_override=x.test.example.com"}
	caIgnored := []string{"-use_tls=true",
		"-ca_file=" + testdata.Path("x509/server_ca_cert.pem"), "-server_host_override=x.test.example.com"}
	for _, server := range []*program{leanServer, grpcGoServer} {
		srv := startServer(t, server.get(t), serverArgs...)
		for _, client := range []*program{leanClient, grpcGoClient} {
			t.Run(client.name+"_to_"+server.name, func(t *testing.T) {
				for _, tc := range []string{"empty_unary", "large_unary"} {
					if out, err := runClient(client.get(t), srv.port, tc, withCA...); err != nil {
						t.Errorf("%s with %v: %v\n%s", tc, withCA, err, tail(out))
					}
				}
				out, err := runClient(client.get(t), srv.port, "empty_unary", caIgnored...)
				if err == nil || !bytes.Contains(out, []byte("certificate signed by unknown authority")) {
					t.Errorf("-ca_file without -use_test_ca: %v, want an unknown authority\n%s", err, tail(out))
				}
			})
		}
	}
}

// TestHarnessDetectsFailure checks that a failing case is reported as one:
// grpc-go's client against a port where nothing listens must exit non-zero.
func TestHarnessDetectsFailure(t *testing.T) {
	clientBin := grpcGoClient.get(t)
	out, err := runClient(clientBin, freePort(t), "empty_unary", plaintext.clientArgs...)
	if err == nil {
		t.Fatalf("client against a closed port succeeded; output:\n%s", out)
	}
	t.Logf("failed as expected: %v", err)
}

// TestClientRejectsUnknownCase checks that our client does not pass a case it
// does not implement.
func TestClientRejectsUnknownCase(t *testing.T) {
	srv := startServer(t, grpcGoServer.get(t), "-use_tls=false")
	out, err := runClient(shimClient.get(t), srv.port, "no_such_case", plaintext.clientArgs...)
	if err == nil {
		t.Fatalf("unknown test case succeeded; output:\n%s", out)
	}
	if !bytes.Contains(out, []byte("unsupported test case")) {
		t.Errorf("output does not name the problem:\n%s", out)
	}
}

// TestExamples runs examples/echo: the server, then the client against it.
func TestExamples(t *testing.T) {
	server := (&program{name: "echo-server", build: goBuild("github.com/leangrpc/leangrpc/examples/echo/server")}).get(t)
	client := (&program{name: "echo-client", build: goBuild("github.com/leangrpc/leangrpc/examples/echo/client")}).get(t)
	port := freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv := startProcess(t, server, port, "-addr="+addr)
	defer srv.stop()

	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, client, "-addr="+addr, "-msg=interop says hi", "-who=tester").CombinedOutput()
	if err != nil {
		t.Fatalf("echo client: %v\n%s\n--- server:\n%s", err, out, srv.out.From(0))
	}
	for _, want := range []string{"echo: interop says hi", "echoed-for: [tester]", "/grpc.testing.TestService/UnaryCall"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("echo client output lacks %q:\n%s", want, out)
		}
	}
}

// runClient runs one case in a fresh client process with the security
// flags sec. The error wraps context.DeadlineExceeded when the process ran
// out of time.
func runClient(bin string, port int, testCase string, sec ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	args := append([]string{"-server_host=127.0.0.1", "-server_port=" + strconv.Itoa(port), "-test_case=" + testCase}, clientArgs...)
	args = append(args, sec...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return out, fmt.Errorf("no result within %v: %w (%v)", caseTimeout, ctx.Err(), err)
	}
	return out, err
}

// serverProc is a running server process and its captured output.
type serverProc struct {
	bin  string
	args []string
	port int
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when the process has exited
}

// startServer starts an interop server (flag -port) on a free port and
// waits until it accepts connections. It is stopped at the end of t.
func startServer(t *testing.T, bin string, args ...string) *serverProc {
	t.Helper()
	var lastErr error
	for range 3 { // the free port can be taken between probe and bind
		s := &serverProc{bin: bin, args: args, port: freePort(t), out: &syncBuffer{}}
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.stop)
			return s
		}
		s.stop()
	}
	t.Fatalf("starting %s: %v", filepath.Base(bin), lastErr)
	return nil
}

// startProcess starts bin with args, listening on port, and waits until the
// port accepts connections.
func startProcess(t *testing.T, bin string, port int, args ...string) *serverProc {
	t.Helper()
	s := &serverProc{bin: bin, port: port, out: &syncBuffer{}}
	if err := s.startCmd(args); err != nil {
		s.stop()
		t.Fatalf("starting %s: %v", filepath.Base(bin), err)
	}
	return s
}

func (s *serverProc) start() error {
	return s.startCmd(append([]string{"-port=" + strconv.Itoa(s.port)}, s.args...))
}

func (s *serverProc) startCmd(args []string) error {
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.Stdout = s.out
	s.cmd.Stderr = s.out
	s.done = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		close(s.done)
		return err
	}
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	deadline := time.Now().Add(serverStartup)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("exited before listening (%v); output:\n%s", s.cmd.ProcessState, s.out.From(0))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s after %v; output:\n%s", addr, serverStartup, s.out.From(0))
		}
	}
}

// ensureRunning restarts the server on the same port if it has exited, so
// that one crash fails one case, not all the following ones.
func (s *serverProc) ensureRunning(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
	default:
		return
	}
	t.Errorf("server had exited (%v) before this case; output:\n%s", s.cmd.ProcessState, tail(s.out.From(0)))
	s.out = &syncBuffer{}
	if err := s.start(); err != nil {
		t.Fatalf("restarting the server: %v", err)
	}
}

func (s *serverProc) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Kill()
	<-s.done
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tail returns the last lines of out, enough to show a failure.
func tail(out []byte) []byte {
	const max = 8 << 10
	if len(out) > max {
		return append([]byte("...\n"), out[len(out)-max:]...)
	}
	return out
}

// syncBuffer is an output sink written by a process and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// From returns a copy of what was written from offset on.
func (b *syncBuffer) From(offset int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if offset > b.buf.Len() {
		offset = b.buf.Len()
	}
	return bytes.Clone(b.buf.Bytes()[offset:])
}
