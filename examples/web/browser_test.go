//go:build unix

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	pb "google.golang.org/grpc/examples/features/proto/echo"
	"google.golang.org/grpc/status"
)

// chromium is Debian's Chromium, which scripts/install-chromium.sh
// installs.
const chromium = "/usr/bin/chromium"

// The time limits of the test's steps.
const (
	npmInstallLimit = 4 * time.Minute
	buildLimit      = time.Minute
	browserLimit    = time.Minute
)

// The page's checks, each run through every transport (src/app.ts).
var (
	wantTransports = []string{"grpc-web", "grpc-web+json", "connect", "connect+proto"}
	wantChecks     = []string{"unary", "unary-empty", "unary-large", "server-stream", "unary-error", "server-stream-error", "concurrent", "cancel"}
)

// pageResults is what the page reports (Results in src/app.ts).
type pageResults struct {
	Origin       string                                 `json:"origin"`
	HTTPVersions map[string][]string                    `json:"httpVersions"`
	Suites       map[string]map[string]map[string]check `json:"suites"`
	Refused      map[string]check                       `json:"refused"`
	Passed       int                                    `json:"passed"`
	Failed       int                                    `json:"failed"`
	Done         bool                                   `json:"done"`
	Error        string                                 `json:"error"`
}

type check struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// TestBrowser builds the page with npm (protoc-gen-es, esbuild), serves it
// and the Echo service on one port, and has headless Chromium open it: the
// page calls the service with gRPC-Web and Connect (binary and JSON) —
// unary, server streaming, failures with an ErrorInfo detail, metadata
// both ways (a binary header too), the deadline, 24 calls at once, a
// stream the client cancels (which must end on the server too) —
// same-origin, then cross-origin against a server allowing the page's
// origin (CORSOrigins), and checks that a server of another origin that
// does not allow it cannot be read. The page posts its results, as it
// shows them, to the page server, and every check must have passed.
//
// It does so twice: over plain HTTP, where the browser speaks HTTP/1.1
// (which leangrpc's listener hands to net/http), and over TLS, where it
// speaks HTTP/2 (served by leangrpc's own HTTP/2 engine).
func TestBrowser(t *testing.T) {
	need(t, "Chromium ("+chromium+"; install it with scripts/install-chromium.sh)", fileExists(chromium))
	_, npmErr := exec.LookPath("npm")
	_, nodeErr := exec.LookPath("node")
	need(t, "npm and node (Node.js)", npmErr == nil && nodeErr == nil)

	dist := buildPage(t)
	t.Run("http", func(t *testing.T) { browse(t, dist, "http", "http/1.1") })
	t.Run("https", func(t *testing.T) { browse(t, dist, "https", "h2", tlsCreds(selfSigned(t))) })
}

// browse serves the page and the service over scheme, runs the page in
// Chromium and checks its results, and that the browser spoke httpVersion
// to the page's server.
func browse(t *testing.T, dist, scheme, httpVersion string, opts ...leangrpc.ServerOption) {
	results := make(chan []byte, 1)
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(dist)))
	mux.HandleFunc("POST /results", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case results <- b:
		default:
		}
	})
	ends := make(chan streamEnd, 4*len(wantTransports))
	watch := leangrpc.StreamInterceptor(watchSlowStreams(ends))
	with := func(more ...leangrpc.ServerOption) []leangrpc.ServerOption {
		return append(append([]leangrpc.ServerOption{}, opts...), more...)
	}
	page := serve(t, newServer(mux, with(watch)...)) // no CORSOrigins: the page is same-origin
	pageOrigin := scheme + "://" + page
	cross := serve(t, newServer(http.NotFoundHandler(), with(watch, leangrpc.CORSOrigins(pageOrigin))...))
	refuse := serve(t, newServer(http.NotFoundHandler(), with()...))
	url := pageOrigin + "/?cross=" + scheme + "://" + cross + "&refuse=" + scheme + "://" + refuse + "&report=/results"

	start := time.Now()
	body := runChromium(t, url, results, scheme == "https")
	t.Logf("browser: page loaded, all calls made and reported in %v", time.Since(start).Round(time.Millisecond))

	var res pageResults
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatalf("the page's results: %v\n%s", err, body)
	}
	if !res.Done || res.Error != "" || res.Origin != pageOrigin {
		t.Errorf("page: done %v, error %q, origin %q (want %q)", res.Done, res.Error, res.Origin, pageOrigin)
	}
	if v := res.HTTPVersions[pageOrigin]; len(v) != 1 || v[0] != httpVersion {
		t.Errorf("the browser spoke %q to the page's server; want %q", v, httpVersion)
	}
	for _, where := range []string{"same-origin", "cross-origin"} {
		for _, tr := range wantTransports {
			for _, name := range wantChecks {
				c, ok := res.Suites[where][tr][name]
				switch {
				case !ok:
					t.Errorf("%s %s %s: missing", where, tr, name)
				case !c.OK:
					t.Errorf("%s %s %s: FAILED: %s", where, tr, name, c.Detail)
				default:
					t.Logf("%s %s %s: ok: %s", where, tr, name, shorten(c.Detail))
				}
			}
		}
	}
	for _, tr := range wantTransports {
		c, ok := res.Refused[tr]
		switch {
		case !ok:
			t.Errorf("refused %s: missing", tr)
		case !c.OK:
			t.Errorf("refused %s: FAILED: %s", tr, c.Detail)
		default:
			t.Logf("refused %s: ok: %s", tr, c.Detail)
		}
	}
	if want := 2*len(wantTransports)*len(wantChecks) + len(wantTransports); res.Passed != want || res.Failed != 0 {
		t.Errorf("page counted %d passed, %d failed; want %d passed", res.Passed, res.Failed, want)
	}

	// The streams the page canceled ended on the server too, as canceled,
	// long before they would have ended by themselves (10 s).
	deadline := time.After(5 * time.Second)
	for i := 0; i < 2*len(wantTransports); i++ {
		select {
		case e := <-ends:
			t.Logf("a canceled stream ended on the server: %v after %v", e.code, e.took.Round(time.Millisecond))
			if e.code != codes.Canceled || e.took > 3*time.Second {
				t.Errorf("a canceled stream ended on the server with %v after %v; want Canceled, soon", e.code, e.took)
			}
		case <-deadline:
			t.Fatalf("%d of the %d streams the page canceled have not ended on the server", 2*len(wantTransports)-i, 2*len(wantTransports))
		}
	}
}

// streamEnd is how a "slow" stream ended on the server.
type streamEnd struct {
	code codes.Code
	took time.Duration
}

// watchSlowStreams is a stream interceptor that reports to ends how each
// "slow" stream (the ones the page cancels) ended.
func watchSlowStreams(ends chan<- streamEnd) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		rec := &recordRequest{ServerStream: ss}
		err := handler(srv, rec)
		if rec.message == "slow" {
			select {
			case ends <- streamEnd{status.Code(err), time.Since(start)}:
			default:
			}
		}
		return err
	}
}

// recordRequest records the message of a stream's request.
type recordRequest struct {
	grpc.ServerStream
	message string
}

func (r *recordRequest) RecvMsg(m any) error {
	err := r.ServerStream.RecvMsg(m)
	if req, ok := m.(*pb.EchoRequest); ok && err == nil {
		r.message = req.GetMessage()
	}
	return err
}

// selfSigned is a certificate for 127.0.0.1 that signs itself (Chromium
// runs with --ignore-certificate-errors for it).
func selfSigned(t *testing.T) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// need skips the test when what is missing, or fails it when the
// environment variable CI is set (CI must run it).
func need(t *testing.T, what string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing, and CI is set: CI must run the browser test", what)
	}
	t.Skipf("skipping the browser test: %s is missing", what)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// buildPage copies the page's sources into a temporary directory, installs
// the npm packages package-lock.json names there, and builds the page
// (buf generate with protoc-gen-es, then esbuild). It returns the
// directory of the built page.
func buildPage(t *testing.T) string {
	dir := t.TempDir()
	for _, p := range []string{"package.json", "package-lock.json", "buf.gen.yaml", "proto", "src"} {
		if err := copyTree(p, filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, npmInstallLimit, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	run(t, dir, buildLimit, "npm", "run", "build")
	dist := filepath.Join(dir, "dist")
	for _, f := range []string{"index.html", "app.js"} {
		if !fileExists(filepath.Join(dist, f)) {
			t.Fatalf("the build made no dist/%s", f)
		}
	}
	return dist
}

// copyTree copies the file or directory src to dst, leaving out what the
// build makes (src/gen) and node_modules.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || filepath.ToSlash(path) == "src/gen") {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}

// run runs a command in dir within limit, killing its whole process group
// when the limit passes, and fails the test if it fails.
func run(t *testing.T, dir string, limit time.Duration, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	timer := time.AfterFunc(limit, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err = cmd.Wait()
	timer.Stop()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything it left running
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("%s %s (in %v, limit %v): %v\n%s", name, strings.Join(args, " "), took, limit, err, b)
	}
	t.Logf("%s %s: %v", name, strings.Join(args, " "), took)
}

// runChromium opens url in headless Chromium with a fresh profile, and
// returns what the page posts to results within browserLimit. Chromium and
// every process it started are ended before it returns.
func runChromium(t *testing.T, url string, results <-chan []byte, insecureTLS bool) []byte {
	profile, err := os.MkdirTemp("", "leangrpc-web-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "chromium.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		// Without these, Chromium tries the network at start, and this
		// machine's closed network refuses it.
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--enable-logging=stderr", "--v=0",
		"--user-data-dir=" + profile,
	}
	if insecureTLS {
		args = append(args, "--ignore-certificate-errors") // the test's self-signed certificate
	}
	cmd := exec.Command(chromium, append(args, url)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	var waitErr error
	wait := func(d time.Duration) bool {
		select {
		case waitErr = <-exited:
			return true
		case <-time.After(d):
			return false
		}
	}
	stop := func() {
		once.Do(func() {
			pgid := cmd.Process.Pid
			syscall.Kill(-pgid, syscall.SIGTERM)
			if !wait(5 * time.Second) {
				syscall.Kill(-pgid, syscall.SIGKILL)
				wait(5 * time.Second)
			}
			syscall.Kill(-pgid, syscall.SIGKILL) // helpers that outlived the browser
			for i := 0; i < 20; i++ {
				if err := os.RemoveAll(profile); err == nil {
					return
				}
				time.Sleep(100 * time.Millisecond) // a helper still writing as it dies
			}
			t.Logf("could not remove Chromium's profile %s", profile)
		})
	}
	defer stop()
	logTail := func() string {
		b, _ := os.ReadFile(logf.Name())
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, "dbus") && strings.TrimSpace(l) != "" { // no D-Bus here: noise
				keep = append(keep, l)
			}
		}
		if len(keep) > 40 {
			keep = keep[len(keep)-40:]
		}
		return strings.Join(keep, "\n")
	}
	select {
	case b := <-results:
		return b
	case <-time.After(browserLimit):
		stop()
		t.Fatalf("the page reported no results within %v; Chromium's log:\n%s", browserLimit, logTail())
	case waitErr = <-exited:
		once.Do(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); os.RemoveAll(profile) })
		t.Fatalf("Chromium exited (%v) before the page reported; its log:\n%s", waitErr, logTail())
	}
	return nil
}

func shorten(s string) string {
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}
