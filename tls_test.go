package leangrpc_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc"
	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/oauth"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/testdata"
)

// serverTLSSetup is TLS with grpc-go's test certificate for
// *.test.example.com and a client that trusts its CA.
func serverTLSSetup(t *testing.T) credsSetup {
	return credsSetup{
		server: credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{tlsKeyPair(t, "x509/server1_cert.pem", "x509/server1_key.pem")}}),
		client: credentials.NewTLS(&tls.Config{RootCAs: tlsCAPool(t, "x509/server_ca_cert.pem"), ServerName: "x.test.example.com"}),
	}
}

// tlsKeyPair loads one of grpc-go's test key pairs by testdata name.
func tlsKeyPair(t *testing.T, cert, key string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(testdata.Path(cert), testdata.Path(key))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tlsCAPool loads one of grpc-go's test CAs by testdata name.
func tlsCAPool(t *testing.T, ca string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(testdata.Path(ca))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", ca)
	}
	return pool
}

// TestTLSAuthInfo: over TLS, the handler's peer and the client's
// grpc.Peer carry a credentials.TLSInfo with the connection state
// (TLS 1.3, ALPN h2, the server's certificate, PrivacyAndIntegrity), for
// unary and streaming calls, as grpc-go's do.
func TestTLSAuthInfo(t *testing.T) {
	compareWithGRPCGo(t, serverTLSSetup, func(t *testing.T, ref credsObservation) {
		c, s := ref.ClientUnary, ref.ServerUnary
		if c.AuthType != "tls" || c.ALPN != "h2" || c.Version != tls.VersionTLS13 || c.Level != credentials.PrivacyAndIntegrity ||
			c.ServerName != "x.test.example.com" || !reflect.DeepEqual(c.PeerCerts, []string{"test-server1"}) || len(c.VerifiedChains) != 1 {
			t.Errorf("client view: %+v", c)
		}
		if s.AuthType != "tls" || s.ALPN != "h2" || !s.HandshakeComplete || len(s.PeerCerts) != 0 {
			t.Errorf("server view: %+v", s)
		}
	})
}

// TestMutualTLS: with client certificates required and verified, the
// handler's TLSInfo holds the client's certificate and its verified chain
// (client certificate, client CA), on both stacks.
func TestMutualTLS(t *testing.T) {
	compareWithGRPCGo(t, func(t *testing.T) credsSetup {
		return mutualTLS(t, true)
	}, func(t *testing.T, ref credsObservation) {
		want := [][]string{{"test-client1", "test-client_ca"}}
		for _, v := range []peerView{ref.ServerUnary, ref.ServerStream} {
			if !reflect.DeepEqual(v.PeerCerts, []string{"test-client1"}) || !reflect.DeepEqual(v.VerifiedChains, want) {
				t.Errorf("server view: %+v", v)
			}
		}
	})
}

// TestMutualTLSWithoutClientCert: a client without a certificate is
// refused by a server that requires one, with the same status on both
// stacks. Under TLS 1.3 the client's handshake completes before the server
// has checked the certificate, so the refusal reaches the client as the
// connection's end during the first call.
func TestMutualTLSWithoutClientCert(t *testing.T) {
	compareWithGRPCGo(t, func(t *testing.T) credsSetup {
		return mutualTLS(t, false)
	}, func(t *testing.T, ref credsObservation) {
		if ref.UnaryCode != codes.Unavailable || ref.StreamCode != codes.Unavailable {
			t.Errorf("a client without a certificate: %+v, want Unavailable", ref)
		}
	})
}

// mutualTLS returns TLS credentials for a server that requires and
// verifies client certificates, and for a client that presents one when
// withCert.
func mutualTLS(t *testing.T, withCert bool) credsSetup {
	server := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{tlsKeyPair(t, "x509/server1_cert.pem", "x509/server1_key.pem")},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    tlsCAPool(t, "x509/client_ca_cert.pem"),
	})
	cfg := &tls.Config{RootCAs: tlsCAPool(t, "x509/server_ca_cert.pem"), ServerName: "x.test.example.com"}
	if withCert {
		cfg.Certificates = []tls.Certificate{tlsKeyPair(t, "x509/client1_cert.pem", "x509/client1_key.pem")}
	}
	return credsSetup{server: server, client: credentials.NewTLS(cfg)}
}

// TestTLSHandshakeFailureStatus: a client whose handshake fails (the
// server's certificate is not valid for the name it asked for) fails its
// calls with the status grpc-go's client reports, message included.
func TestTLSHandshakeFailureStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"unknown_ca", &tls.Config{RootCAs: tlsCAPool(t, "x509/client_ca_cert.pem"), ServerName: "x.test.example.com"}},
		{"wrong_name", &tls.Config{RootCAs: tlsCAPool(t, "x509/server_ca_cert.pem"), ServerName: "x.example.org"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setup := func(t *testing.T) credsSetup {
				return credsSetup{
					server: credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{tlsKeyPair(t, "x509/server1_cert.pem", "x509/server1_key.pem")}}),
					client: credentials.NewTLS(tc.cfg),
				}
			}
			want := observeCreds(t, grpcgoPair, setup(t))
			if want.UnaryCode != codes.Unavailable || !strings.Contains(want.unaryMsg, "authentication handshake failed") {
				t.Fatalf("grpc-go: %v %q", want.UnaryCode, want.unaryMsg)
			}
			forPairs(t, func(t *testing.T, p pair) {
				got := observeCreds(t, p, setup(t))
				if got.UnaryCode != want.UnaryCode || got.unaryMsg != want.unaryMsg || got.StreamCode != want.StreamCode || got.streamMsg != want.streamMsg {
					t.Errorf("%s: unary %v %q, streaming %v %q; grpc-go: unary %v %q, streaming %v %q", p.name,
						got.UnaryCode, got.unaryMsg, got.StreamCode, got.streamMsg, want.UnaryCode, want.unaryMsg, want.StreamCode, want.streamMsg)
				}
			})
		})
	}
}

// requestInfoCreds is a per-RPC credential that records what
// credentials.RequestInfoFromContext gives it.
type requestInfoCreds struct{ seen chan string }

func (c requestInfoCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	ri, ok := credentials.RequestInfoFromContext(ctx)
	s := fmt.Sprintf("found %v, method %q", ok, ri.Method)
	if ri.AuthInfo != nil {
		s += ", auth " + ri.AuthInfo.AuthType()
	}
	c.seen <- s
	return nil, nil
}

func (requestInfoCreds) RequireTransportSecurity() bool { return false }

// TestPerRPCCredsGetRequestInfo: per-RPC credentials find the method and
// the connection's AuthInfo in their context, as under grpc-go. grpc-go's
// oauth credentials refuse to send a token without them, so their token
// reaches the server over TLS on both stacks.
func TestPerRPCCredsGetRequestInfo(t *testing.T) {
	token := oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "tok", TokenType: "Bearer"})}
	for _, lean := range []bool{false, true} {
		p := pair{name: "grpc-grpc"}
		if lean {
			p = pair{name: "lean-client_grpc-server", leanClient: true}
		}
		t.Run(p.name, func(t *testing.T) {
			seen := make(chan string, 4)
			cs := serverTLSSetup(t)
			// One set as a dial option, one as a call option (a call
			// takes one; a later one replaces an earlier).
			cs.dialOpts = []leangrpc.DialOption{leangrpc.WithPerRPCCredentials(requestInfoCreds{seen})}
			cs.grpcDialOpts = []grpc.DialOption{grpc.WithPerRPCCredentials(requestInfoCreds{seen})}
			cs.callOpts = []grpc.CallOption{grpc.PerRPCCredentials(token)}
			e := startCredsEnv(t, p, cs)
			if _, err := e.tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{}, cs.callOpts...); err != nil {
				t.Fatalf("call with oauth credentials over TLS: %v", err)
			}
			if got, want := receive(t, seen), `found true, method "/grpc.testing.TestService/UnaryCall", auth tls`; got != want {
				t.Errorf("credentials saw %s, want %s", got, want)
			}
			if got := receive(t, e.seen).md.Get("authorization"); len(got) != 1 || got[0] != "Bearer tok" {
				t.Errorf("server got authorization %q, want the oauth token", got)
			}
		})
	}
}

// TestAuthorityMustMatchServerName: NewClient refuses TLS credentials
// naming one server together with WithAuthority naming another, with
// grpc-go's error; the same name twice, or an authority with credentials
// that name no server, are accepted.
func TestAuthorityMustMatchServerName(t *testing.T) {
	named := credentials.NewTLS(&tls.Config{ServerName: "x.test.example.com"})
	unnamed := credentials.NewTLS(&tls.Config{})
	for _, tc := range []struct {
		name      string
		creds     credentials.TransportCredentials
		authority string
	}{
		{"mismatch", named, "y.test.example.com"},
		{"match", named, "x.test.example.com"},
		{"authority_only", unnamed, "y.test.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc, lerr := leangrpc.NewClient("127.0.0.1:1", leangrpc.WithTransportCredentials(tc.creds), leangrpc.WithAuthority(tc.authority))
			if lerr == nil {
				lc.Close()
			}
			gc, gerr := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(tc.creds), grpc.WithAuthority(tc.authority))
			if gerr == nil {
				gc.Close()
			}
			if (lerr == nil) != (gerr == nil) || lerr != nil && !strings.HasSuffix(gerr.Error(), lerr.Error()) {
				t.Errorf("leangrpc: %v; grpc-go: %v", lerr, gerr)
			}
			if tc.name == "mismatch" && lerr == nil {
				t.Error("mismatched authority accepted")
			}
		})
	}
}
