package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
)

// benchTLS is the TLS set-up of the TLS configs of a run (every config
// under -tls, the quick suite's TLS idle row without it): one self-signed
// ECDSA P-256 certificate for 127.0.0.1, made by the parent at start and
// handed to the children of those configs through two files, so that the
// idle workload's server and client children trust the same key. Both stacks get grpc-go's
// credentials.NewTLS at TLS 1.3, the setting a deployment would pick.
type benchTLS struct {
	certFile, keyFile string
	server, client    credentials.TransportCredentials
}

// tlsDescription is how the header line and the JSON name the set-up.
const tlsDescription = "TLS 1.3, ECDSA P-256"

// newBenchTLS makes the key and certificate, writes them to dir and loads
// them as loadBenchTLS does in a child.
func newBenchTLS(dir string) (*benchTLS, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "leanbench"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own root, so that the client can trust it
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	return loadBenchTLS(certFile, keyFile)
}

// loadBenchTLS builds both roles' credentials from the files newBenchTLS
// wrote.
func loadBenchTLS(certFile, keyFile string) (*benchTLS, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("-tls: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("-tls: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return &benchTLS{
		certFile: certFile,
		keyFile:  keyFile,
		server:   credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}),
		client:   credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}),
	}, nil
}

// newPlanTLS makes the set-up when a config of plan runs over TLS (under
// -tls, or the quick suite's TLS idle row), in a temporary directory that
// remove deletes; nil, and nothing to remove, when every config is
// plaintext.
func newPlanTLS(plan []config) (sec *benchTLS, remove func(), err error) {
	if !slices.ContainsFunc(plan, func(c config) bool { return c.tls }) {
		return nil, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "leanbench-tls-")
	if err != nil {
		return nil, nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	if sec, err = newBenchTLS(dir); err != nil {
		remove()
		return nil, nil, err
	}
	return sec, remove, nil
}

// overTLS is the plan under -tls: every config over TLS. Configs that
// differed only in that (the quick suite's two idle rows) become one.
func overTLS(plan []config) []config {
	var out []config
	for _, c := range plan {
		c.tls = true
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// planSecurity is how Env.Security names a plan's connections: "" when
// every config is plaintext, tlsDescription when every one is over TLS
// (-tls), and which rows are when the plan mixes both (the quick suite).
func planSecurity(plan []config) string {
	n := 0
	for _, c := range plan {
		if c.tls {
			n++
		}
	}
	switch n {
	case 0:
		return ""
	case len(plan):
		return tlsDescription
	}
	return "plaintext (tls rows: " + tlsDescription + ")"
}

// security is the set-up a run of c uses: the run's certificate for a TLS
// config, nil (plaintext) for the others.
func (r *runner) security(c config) *benchTLS {
	if !c.tls {
		return nil
	}
	if r.opts.tls == nil {
		// run makes the certificate for any plan with a TLS config
		// (newPlanTLS); measuring plaintext under a tls label would be
		// worse than stopping.
		panic("leanbench: config " + c.String() + " is over TLS but the run has no certificate")
	}
	return r.opts.tls
}

// childArgs are the flags that give a child the same set-up; none without
// TLS.
func (b *benchTLS) childArgs() []string {
	if b == nil {
		return nil
	}
	return []string{"-tlscert", b.certFile, "-tlskey", b.keyFile}
}

// childTLS loads the set-up a child was given, nil when it was given none.
func childTLS(certFile, keyFile string) (*benchTLS, error) {
	if certFile == "" && keyFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("-tlscert and -tlskey go together")
	}
	return loadBenchTLS(certFile, keyFile)
}

// serverCreds and clientCreds return the role's credentials, nil for
// plaintext.
func (b *benchTLS) serverCreds() credentials.TransportCredentials {
	if b == nil {
		return nil
	}
	return b.server
}

func (b *benchTLS) clientCreds() credentials.TransportCredentials {
	if b == nil {
		return nil
	}
	return b.client
}

// checkPeerSecurity tells whether a call's peer shows the security the run
// asked for: TLS 1.3 with ALPN h2 for a TLS config, no TLS otherwise. In
// a TLS run each connection's first call is checked, so that a stack or a
// child that ignored the certificate fails its run instead of measuring
// plaintext.
func checkPeerSecurity(p *peer.Peer, sec *benchTLS) error {
	ti, isTLS := p.AuthInfo.(credentials.TLSInfo)
	switch {
	case sec == nil && isTLS:
		return errors.New("connection is TLS in a plaintext run")
	case sec == nil:
		return nil
	case !isTLS:
		return fmt.Errorf("connection is not TLS in a TLS run (AuthInfo %v)", p.AuthInfo)
	case ti.State.Version != tls.VersionTLS13 || ti.State.NegotiatedProtocol != "h2":
		return fmt.Errorf("TLS version %#x, ALPN %q; want TLS 1.3, h2", ti.State.Version, ti.State.NegotiatedProtocol)
	}
	return nil
}

// checkConnSecurity makes one call on cc and checks its peer.
func checkConnSecurity(ctx context.Context, cc grpc.ClientConnInterface, sec *benchTLS) error {
	var p peer.Peer
	req := &testpb.SimpleRequest{ResponseSize: 1, Payload: &testpb.Payload{Body: zeroBody(1)}}
	if _, err := testpb.NewBenchmarkServiceClient(cc).UnaryCall(ctx, req, grpc.Peer(&p)); err != nil {
		return fmt.Errorf("first call: %w", err)
	}
	return checkPeerSecurity(&p, sec)
}
