package leangrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/leangrpc/leangrpc"
	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/oauth"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/testdata"
)

// authRecorder is a unary server interceptor keeping the authorization
// fields of the last call.
type authRecorder struct {
	mu   sync.Mutex
	last []string
}

func (r *authRecorder) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	r.last = md.Get("authorization")
	r.mu.Unlock()
	return h(ctx, req)
}

func (r *authRecorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// dialAny makes a client of either implementation.
func dialAny(t *testing.T, lean bool, addr string, creds credentials.TransportCredentials, perRPC credentials.PerRPCCredentials) (grpc.ClientConnInterface, error) {
	t.Helper()
	if lean {
		opts := []leangrpc.DialOption{leangrpc.WithTransportCredentials(creds)}
		if perRPC != nil {
			opts = append(opts, leangrpc.WithPerRPCCredentials(perRPC))
		}
		cc, err := leangrpc.NewClient(addr, opts...)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { cc.Close() })
		return cc, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if perRPC != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(perRPC))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cc.Close() })
	return cc, nil
}

// serveAny starts the interop TestService on either implementation with
// creds (nil: plaintext) and a unary interceptor.
func serveAny(t *testing.T, lean bool, creds credentials.TransportCredentials, ui grpc.UnaryServerInterceptor) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	if lean {
		opts := []leangrpc.ServerOption{leangrpc.UnaryInterceptor(ui)}
		if creds != nil {
			opts = append(opts, leangrpc.Creds(creds))
		}
		s := leangrpc.NewServer(opts...)
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		go func() { defer close(done); s.Serve(lis) }()
		t.Cleanup(func() { s.Stop(); <-done })
	} else {
		opts := []grpc.ServerOption{grpc.UnaryInterceptor(ui)}
		if creds != nil {
			opts = append(opts, grpc.Creds(creds))
		}
		s := grpc.NewServer(opts...)
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		go func() { defer close(done); s.Serve(lis) }()
		t.Cleanup(func() { s.Stop(); <-done })
	}
	return lis.Addr().String()
}

// TestOAuthTokenSourceOverTLS sends grpc-go's oauth.TokenSource, which
// refuses to run without a credentials.RequestInfo whose AuthInfo has
// privacy and integrity, over TLS in the four pairings, as a connection's
// and as a call's credentials.
func TestOAuthTokenSourceOverTLS(t *testing.T) {
	serverCreds, err := credentials.NewServerTLSFromFile(testdata.Path("x509/server1_cert.pem"), testdata.Path("x509/server1_key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	clientCreds, err := credentials.NewClientTLSFromFile(testdata.Path("x509/server_ca_cert.pem"), "x.test.example.com")
	if err != nil {
		t.Fatal(err)
	}
	token := func(s string) oauth.TokenSource {
		return oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: s})}
	}
	forAllPairs(t, func(t *testing.T, p pair) {
		var rec authRecorder
		addr := serveAny(t, p.leanServer, serverCreds, rec.intercept)
		cc, err := dialAny(t, p.leanClient, addr, clientCreds, token("conn-token"))
		if err != nil {
			t.Fatal(err)
		}
		tc := testgrpc.NewTestServiceClient(cc)
		if _, err := tc.EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
			t.Fatalf("connection's TokenSource: %v", err)
		}
		if got := rec.get(); len(got) != 1 || got[0] != "Bearer conn-token" {
			t.Errorf("authorization %q, want the connection's token", got)
		}
		if _, err := tc.EmptyCall(ctxT(t), &testpb.Empty{}, grpc.PerRPCCredentials(token("call-token"))); err != nil {
			t.Fatalf("call's TokenSource: %v", err)
		}
		if got := rec.get(); len(got) != 2 || got[0] != "Bearer conn-token" || got[1] != "Bearer call-token" {
			t.Errorf("authorization %q, want the connection's token then the call's", got)
		}
	})
}

// levelCreds are per-RPC credentials that check the connection's
// security level from credentials.RequestInfo, as token credentials do,
// and report what they were given as metadata.
type levelCreds struct {
	level  credentials.SecurityLevel
	secure bool // RequireTransportSecurity
}

func (c levelCreds) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	ri, ok := credentials.RequestInfoFromContext(ctx)
	if !ok {
		return nil, errors.New("no RequestInfo")
	}
	if err := credentials.CheckSecurityLevel(ri.AuthInfo, c.level); err != nil {
		return nil, fmt.Errorf("level check: %v", err)
	}
	return map[string]string{"X-Method": ri.Method, "x-audience": strings.Join(uri, ","), "x-auth-type": ri.AuthInfo.AuthType()}, nil
}

func (c levelCreds) RequireTransportSecurity() bool { return c.secure }

// TestPerRPCCredentialsAsGRPCGo runs per-RPC credentials over plaintext
// from a leangrpc and a grpc-go client against a leangrpc and a grpc-go
// server, and compares each outcome with grpc-go's client: the
// RequestInfo and audience they are given, the errors of failing
// credentials (a connection's and a call's), credentials that require
// transport security per call and at NewClient.
func TestPerRPCCredentialsAsGRPCGo(t *testing.T) {
	type outcome struct {
		err                      string
		method, audience, authTy []string
	}
	cases := []struct {
		name     string
		conn     credentials.PerRPCCredentials
		call     credentials.PerRPCCredentials
		authTest bool
	}{
		{name: "conn-level-ok", conn: levelCreds{level: credentials.NoSecurity}},
		{name: "call-level-ok", call: levelCreds{level: credentials.NoSecurity}},
		{name: "conn-level-fails", conn: levelCreds{level: credentials.PrivacyAndIntegrity}},
		{name: "call-level-fails", call: levelCreds{level: credentials.PrivacyAndIntegrity}},
		{name: "call-requires-security", call: levelCreds{secure: true}},
		{name: "conn-requires-security", conn: levelCreds{secure: true}},
	}
	for _, leanServer := range []bool{true, false} {
		var seen metadata.MD
		var mu sync.Mutex
		record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			mu.Lock()
			seen = md
			mu.Unlock()
			return h(ctx, req)
		}
		addr := serveAny(t, leanServer, nil, record)
		for _, tc := range cases {
			run := func(lean bool) outcome {
				mu.Lock()
				seen = nil
				mu.Unlock()
				cc, err := dialAny(t, lean, addr, insecure.NewCredentials(), tc.conn)
				if err != nil {
					return outcome{err: "NewClient: " + err.Error()}
				}
				var opts []grpc.CallOption
				if tc.call != nil {
					opts = append(opts, grpc.PerRPCCredentials(tc.call))
				}
				_, err = testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}, opts...)
				if err != nil {
					st := status.Convert(err)
					return outcome{err: st.Code().String() + ": " + st.Message()}
				}
				mu.Lock()
				defer mu.Unlock()
				return outcome{method: seen.Get("x-method"), audience: seen.Get("x-audience"), authTy: seen.Get("x-auth-type")}
			}
			name := fmt.Sprintf("server-lean=%v/%s", leanServer, tc.name)
			want, got := run(false), run(true)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: leangrpc client %+v, grpc-go client %+v", name, got, want)
			}
			if strings.HasSuffix(tc.name, "-ok") && (len(got.method) != 1 || got.method[0] != "/grpc.testing.TestService/EmptyCall" || got.authTy[0] != "insecure") {
				t.Errorf("%s: credentials saw %+v", name, got)
			}
			if !strings.HasSuffix(tc.name, "-ok") && got.err == "" {
				t.Errorf("%s: the call passed", name)
			}
		}
	}
}

// testBundle is a credentials.Bundle of fixed parts.
type testBundle struct {
	tc     credentials.TransportCredentials
	perRPC credentials.PerRPCCredentials
}

func (b testBundle) TransportCredentials() credentials.TransportCredentials { return b.tc }
func (b testBundle) PerRPCCredentials() credentials.PerRPCCredentials       { return b.perRPC }
func (b testBundle) NewWithMode(string) (credentials.Bundle, error)         { return b, nil }

// TestCredentialsBundle runs WithCredentialsBundle (TLS and a token) from
// both clients against a leangrpc server, and compares NewClient's
// refusals of a bundle with transport credentials and of one without.
func TestCredentialsBundle(t *testing.T) {
	serverCreds, err := credentials.NewServerTLSFromFile(testdata.Path("x509/server1_cert.pem"), testdata.Path("x509/server1_key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	clientCreds, err := credentials.NewClientTLSFromFile(testdata.Path("x509/server_ca_cert.pem"), "x.test.example.com")
	if err != nil {
		t.Fatal(err)
	}
	var rec authRecorder
	addr := serveAny(t, true, serverCreds, rec.intercept)
	bundle := testBundle{tc: clientCreds, perRPC: oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "bundled"})}}
	newClient := func(lean bool, b credentials.Bundle, withTC bool) (grpc.ClientConnInterface, error) {
		if lean {
			opts := []leangrpc.DialOption{leangrpc.WithCredentialsBundle(b), leangrpc.WithAuthority("x.test.example.com")}
			if withTC {
				opts = append(opts, leangrpc.WithTransportCredentials(clientCreds))
			}
			cc, err := leangrpc.NewClient(addr, opts...)
			if err == nil {
				t.Cleanup(func() { cc.Close() })
			}
			return cc, err
		}
		// grpc-go takes the TLS server name from the authority here.
		opts := []grpc.DialOption{grpc.WithCredentialsBundle(b), grpc.WithAuthority("x.test.example.com")}
		if withTC {
			opts = append(opts, grpc.WithTransportCredentials(clientCreds))
		}
		cc, err := grpc.NewClient(addr, opts...)
		if err == nil {
			t.Cleanup(func() { cc.Close() })
		}
		return cc, err
	}
	for _, lean := range []bool{false, true} {
		cc, err := newClient(lean, bundle, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}); err != nil {
			t.Fatalf("lean client %v: %v", lean, err)
		}
		if got := rec.get(); len(got) != 1 || got[0] != "Bearer bundled" {
			t.Errorf("lean client %v: authorization %q", lean, got)
		}
	}
	for _, c := range []struct {
		name   string
		b      credentials.Bundle
		withTC bool
	}{
		{"with-transport-credentials", bundle, true},
		{"without-transport-credentials", testBundle{}, false},
	} {
		_, errGRPC := newClient(false, c.b, c.withTC)
		_, errLean := newClient(true, c.b, c.withTC)
		if errGRPC == nil || errLean == nil || errLean.Error() != errGRPC.Error() {
			t.Errorf("%s: leangrpc %v, grpc-go %v", c.name, errLean, errGRPC)
		}
	}
}
