package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/json"
	"os"
	"path/filepath"
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
	}
}
