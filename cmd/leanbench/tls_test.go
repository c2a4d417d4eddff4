package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
)

// TestBenchTLSEveryStack: with the -tls set-up, every client stack talks
// to every server stack over TLS 1.3 with ALPN h2 and the generated P-256
// certificate; a plaintext client of either stack is refused.
func TestBenchTLSEveryStack(t *testing.T) {
	sec, err := newBenchTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A child loads the same files.
	if _, err := childTLS(sec.certFile, sec.keyFile); err != nil {
		t.Fatal(err)
	}
	names := []string{stackLean, stackLeanNoPool, stackGrpc}
	for _, sn := range names {
		srv, err := startServer(impls[sn], sec)
		if err != nil {
			t.Fatal(err)
		}
		for _, cn := range names {
			t.Run(cn+">"+sn, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				cc, closeFn, err := dialSafe(impls[cn], srv.addr, sec, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer closeFn()
				var p peer.Peer
				if _, err := testpb.NewBenchmarkServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 1}, grpc.Peer(&p)); err != nil {
					t.Fatal(err)
				}
				if err := checkPeerSecurity(&p, sec); err != nil {
					t.Error(err)
				}
				if err := checkPeerSecurity(&p, nil); err == nil {
					t.Error("a TLS peer passed the plaintext check")
				}
				ti := p.AuthInfo.(credentials.TLSInfo)
				key, ok := ti.State.PeerCertificates[0].PublicKey.(*ecdsa.PublicKey)
				if !ok || key.Curve != elliptic.P256() {
					t.Errorf("server key %T, want ECDSA P-256", ti.State.PeerCertificates[0].PublicKey)
				}

				plain, closePlain, err := dialSafe(impls[cn], srv.addr, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer closePlain()
				short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
				defer cancelShort()
				if err := checkConnSecurity(short, plain, nil); err == nil {
					t.Error("a plaintext client's call to a TLS server succeeded")
				}
			})
		}
		if err := srv.stop(); err != nil {
			t.Error(err)
		}
	}
}

// TestRunTLS runs a throughput and an idle workload of every stack under
// -tls: each child checks its connections' first call for TLS 1.3, so a
// stack or child that ignored the switch would fail its run here. The
// header and the JSON name the set-up.
func TestRunTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark briefly")
	}
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	args := []string{
		"-tls", "-workloads", "unary,streaming,idle", "-connections", "4",
		"-benchtime", "100ms", "-warmup", "20ms", "-rounds", "1", "-settle", "50ms",
		"-stacks", "all", "-json", jsonPath,
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(strings.SplitN(stdout.String(), "\n", 2)[0], tlsDescription) {
		t.Errorf("header does not name %q:\n%s", tlsDescription, stdout.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.Env.Security != tlsDescription {
		t.Errorf("env.security = %q, want %q", f.Env.Security, tlsDescription)
	}
	if len(f.Results) != 12 { // 3 workloads x 4 stacks
		t.Errorf("%d results, want 12", len(f.Results))
	}
	for _, r := range f.Results {
		if r.Error != "" {
			t.Errorf("%s %s: %s", r.Stack, r.Workload, r.Error)
		}
		if !r.TLS {
			t.Errorf("%s %s: result not marked tls under -tls", r.Stack, r.Workload)
		}
	}
}

// TestRunIdleTLSRow runs a plan with the idle workload twice, plaintext
// and over TLS, as the quick suite has it (at 20 connections). The TLS
// config's children get the certificate: leangrpc-http's server, which
// runs plaintext only, refuses it, and the other stacks' clients check
// each connection's first call for TLS 1.3 (for no TLS in the plaintext
// config's). Both rows report figures, and the table and the JSON keep
// them apart.
func TestRunIdleTLSRow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the idle workload briefly")
	}
	plan := []config{{workload: workloadIdle, connections: 20}, {workload: workloadIdle, connections: 20, tls: true}}
	sec, remove, err := newPlanTLS(plan)
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	stacks, err := parseStacks("grpc-go,leangrpc,leangrpc-http,raw")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	r := &runner{opts: options{rounds: 1, settle: 100 * time.Millisecond, timeout: 15 * time.Second, tls: sec},
		stdout: io.Discard, stderr: &stderr, started: time.Now()}
	results := r.execute(plan, stacks)
	if !strings.Contains(stderr.String(), "idle conns=20 tls, round 1/1") {
		t.Errorf("progress does not name the TLS row:\n%s", stderr.String())
	}
	env := Env{Security: planSecurity(plan)}
	var out bytes.Buffer
	printReport(&out, env, plan, stacks, results)
	t.Logf("\n%s", out.String())
	for _, title := range [][]string{{"idle", "20"}, {"idle", "tls", "20"}} {
		f := row(t, out.String(), "srv RSS/conn", title...)
		// Per stack, grpc-go's first: srv RSS/conn, srv marginal, srv
		// heap/conn, srv stack/conn, srv gor/conn, ...
		if g, err := strconv.ParseFloat(f[4], 64); err != nil || g <= 0 {
			t.Errorf("%q: grpc-go server goroutines/conn %q, want a positive number", title, f[4])
		}
		if _, err := strconv.ParseFloat(f[9], 64); err != nil {
			t.Errorf("%q: leangrpc server RSS/conn %q, want a number", title, f[9])
		}
	}

	jsonPath := filepath.Join(t.TempDir(), "out.json")
	if err := writeJSON(jsonPath, &File{Env: env, Results: results}); err != nil {
		t.Fatal(err)
	}
	f, err := readJSON(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Results) != 6 { // 2 configs x 3 stacks; raw has no idle row
		t.Errorf("%d results, want 6", len(f.Results))
	}
	tlsRuns := 0
	for _, res := range f.Results {
		if res.Stack == stackLeanHTTP && res.TLS {
			if !strings.Contains(res.Error, "without TLS only") {
				t.Errorf("%s over TLS: error %q, want its server's refusal of the certificate", res.Stack, res.Error)
			}
			continue
		}
		if res.Error != "" || res.Server == nil || res.Client == nil {
			t.Errorf("%s %v: no figures (error %q)", res.Stack, resultConfig(res), res.Error)
		}
		if res.TLS {
			tlsRuns++
		}
	}
	if tlsRuns != 2 {
		t.Errorf("%d results with figures marked tls, want 2 (grpc-go's and leangrpc's)", tlsRuns)
	}
}
