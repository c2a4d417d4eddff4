package leangrpc_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// This file runs calls under each kind of transport credentials through
// both stacks and compares what each side learns about its peer with what
// grpc-go reports in the same place.

// grpcgoPair is grpc-go on both sides, the reference the pairs with
// leangrpc are compared with.
var grpcgoPair = pair{name: "grpc-grpc"}

// credsSetup is the credentials of one run: nil server credentials serve
// without any, as a server built without a Creds option does.
type credsSetup struct {
	server, client credentials.TransportCredentials
	unix           bool // over a Unix socket instead of loopback TCP
	dialOpts       []leangrpc.DialOption
	grpcDialOpts   []grpc.DialOption
	callOpts       []grpc.CallOption // on both calls, either stack
}

// peerSeen is what a handler found in its context for one call.
type peerSeen struct {
	p  *peer.Peer
	ok bool
	md metadata.MD // the call's incoming metadata
}

// credsEnv is a server of one stack with credentials and a client of one
// stack dialing it; each call's handler reports its peer on seen.
type credsEnv struct {
	tc   testgrpc.TestServiceClient
	addr string
	seen chan peerSeen
}

// startCredsEnv starts the server and client of p under cs. Both stop at
// the end of t.
func startCredsEnv(t *testing.T, p pair, cs credsSetup) *credsEnv {
	t.Helper()
	network, address := "tcp", "127.0.0.1:0"
	if cs.unix {
		network, address = "unix", filepath.Join(t.TempDir(), "grpc.sock")
	}
	lis, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	e := &credsEnv{addr: lis.Addr().String(), seen: make(chan peerSeen, 8)}
	record := func(ctx context.Context) {
		pr, ok := peer.FromContext(ctx)
		md, _ := metadata.FromIncomingContext(ctx)
		select {
		case e.seen <- peerSeen{pr, ok, md}:
		default:
		}
	}
	unary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		record(ctx)
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		record(ss.Context())
		return h(srv, ss)
	}
	done := make(chan struct{})
	var stop func()
	if p.leanServer {
		opts := []leangrpc.ServerOption{leangrpc.UnaryInterceptor(unary), leangrpc.StreamInterceptor(stream)}
		if cs.server != nil {
			opts = append(opts, leangrpc.Creds(cs.server))
		}
		s := leangrpc.NewServer(opts...)
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		go func() { defer close(done); s.Serve(lis) }()
		stop = s.Stop
	} else {
		opts := []grpc.ServerOption{grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream)}
		if cs.server != nil {
			opts = append(opts, grpc.Creds(cs.server))
		}
		s := grpc.NewServer(opts...)
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		go func() { defer close(done); s.Serve(lis) }()
		stop = s.Stop
	}
	t.Cleanup(func() { stop(); <-done })

	target := e.addr
	dialOpts, grpcDialOpts := cs.dialOpts, cs.grpcDialOpts
	if cs.unix {
		target = "passthrough:///local"
		dialUnix := func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.addr)
		}
		dialOpts = append(dialOpts, leangrpc.WithContextDialer(dialUnix))
		grpcDialOpts = append(grpcDialOpts, grpc.WithContextDialer(dialUnix))
	}
	var cc grpc.ClientConnInterface
	if p.leanClient {
		c, err := leangrpc.NewClient(target, append([]leangrpc.DialOption{leangrpc.WithTransportCredentials(cs.client)}, dialOpts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cc = c
	} else {
		c, err := grpc.NewClient(target, append([]grpc.DialOption{grpc.WithTransportCredentials(cs.client)}, grpcDialOpts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cc = c
	}
	e.tc = testgrpc.NewTestServiceClient(cc)
	return e
}

// peerView is the part of a peer.Peer that does not change from run to
// run, for comparison between stacks.
type peerView struct {
	Found        bool
	AddrNet      string
	HasLocalAddr bool
	AuthType     string // "" when AuthInfo is nil
	AuthGoType   string
	Level        credentials.SecurityLevel
	// From a credentials.TLSInfo only.
	HandshakeComplete bool
	Version           uint16
	ALPN              string
	ServerName        string
	PeerCerts         []string // subject common names
	VerifiedChains    [][]string
}

func viewPeer(p *peer.Peer, ok bool) peerView {
	v := peerView{Found: ok && p != nil}
	if !v.Found {
		return v
	}
	if p.Addr != nil {
		v.AddrNet = p.Addr.Network()
	}
	v.HasLocalAddr = p.LocalAddr != nil
	if p.AuthInfo == nil {
		return v
	}
	v.AuthType = p.AuthInfo.AuthType()
	v.AuthGoType = fmt.Sprintf("%T", p.AuthInfo)
	if ci, ok := p.AuthInfo.(interface {
		GetCommonAuthInfo() credentials.CommonAuthInfo
	}); ok {
		v.Level = ci.GetCommonAuthInfo().SecurityLevel
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		st := ti.State
		v.HandshakeComplete = st.HandshakeComplete
		v.Version = st.Version
		v.ALPN = st.NegotiatedProtocol
		v.ServerName = st.ServerName
		for _, c := range st.PeerCertificates {
			v.PeerCerts = append(v.PeerCerts, c.Subject.CommonName)
		}
		for _, chain := range st.VerifiedChains {
			var names []string
			for _, c := range chain {
				names = append(names, c.Subject.CommonName)
			}
			v.VerifiedChains = append(v.VerifiedChains, names)
		}
	}
	return v
}

// credsObservation is what both ends saw of each other in one unary and
// one streaming call.
type credsObservation struct {
	// The calls' status codes. Their messages are kept apart from the
	// comparison: what a failed connection reports first is a race
	// (the peer's alert read, or a write into the closed socket).
	UnaryCode, StreamCode     codes.Code
	unaryMsg, streamMsg       string
	ServerUnary, ServerStream peerView
	ClientUnary, ClientStream peerView
}

// receive returns the next value on ch, failing t if none comes within
// 10 seconds.
func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received within 10s")
		panic("unreachable")
	}
}

// withoutMessages returns o with the status messages cleared.
func (o credsObservation) withoutMessages() credsObservation {
	o.unaryMsg, o.streamMsg = "", ""
	return o
}

// observeCreds makes a unary and a streaming call under cs between the
// stacks of p and reports what each side saw.
func observeCreds(t *testing.T, p pair, cs credsSetup) credsObservation {
	t.Helper()
	e := startCredsEnv(t, p, cs)
	var o credsObservation
	var cp peer.Peer
	_, err := e.tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 10, Payload: payload(10)}, append(cs.callOpts, grpc.Peer(&cp))...)
	o.UnaryCode, o.unaryMsg = status.Code(err), status.Convert(err).Message()
	if err == nil {
		o.ClientUnary = viewPeer(&cp, true)
		s := receive(t, e.seen)
		o.ServerUnary = viewPeer(s.p, s.ok)
	}
	var sp peer.Peer
	st, err := e.tc.FullDuplexCall(ctxT(t), append(cs.callOpts, grpc.Peer(&sp))...)
	if err == nil {
		err = st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 10}}})
		if err == nil || err == io.EOF { // io.EOF: the status comes from Recv
			_, err = st.Recv()
		}
		if err == nil {
			st.CloseSend()
			if _, err = st.Recv(); err == io.EOF {
				err = nil
			}
		}
	}
	o.StreamCode, o.streamMsg = status.Code(err), status.Convert(err).Message()
	if err == nil {
		o.ClientStream = viewPeer(&sp, true)
		s := receive(t, e.seen)
		o.ServerStream = viewPeer(s.p, s.ok)
	}
	return o
}

// compareWithGRPCGo runs observeCreds between grpc-go's client and server,
// then for each pair with leangrpc on one side or both, and reports every
// difference. check, when not nil, validates each observation, the
// reference included, so a test also fails when both stacks are wrong the
// same way.
func compareWithGRPCGo(t *testing.T, cs func(t *testing.T) credsSetup, check func(t *testing.T, ref credsObservation)) {
	t.Helper()
	var ref credsObservation
	t.Run(grpcgoPair.name, func(t *testing.T) {
		ref = observeCreds(t, grpcgoPair, cs(t))
		if check != nil {
			check(t, ref)
		}
	})
	forPairs(t, func(t *testing.T, p pair) {
		got := observeCreds(t, p, cs(t))
		if !reflect.DeepEqual(got.withoutMessages(), ref.withoutMessages()) {
			t.Errorf("%s saw\n%+v\ngrpc-go saw\n%+v", p.name, got, ref)
		}
		if check != nil {
			check(t, got)
		}
	})
}

// TestInsecureCredentials: insecure credentials on both roles give the
// handler and the client an "insecure" AuthInfo with NoSecurity; a server
// without credentials gives its handlers a peer without AuthInfo.
func TestInsecureCredentials(t *testing.T) {
	t.Run("server_creds", func(t *testing.T) {
		compareWithGRPCGo(t, func(*testing.T) credsSetup {
			return credsSetup{server: insecure.NewCredentials(), client: insecure.NewCredentials()}
		}, func(t *testing.T, ref credsObservation) {
			if ref.ServerUnary.AuthType != "insecure" || ref.ClientUnary.AuthType != "insecure" || ref.ServerStream.Level != credentials.NoSecurity {
				t.Errorf("%+v", ref)
			}
		})
	})
	t.Run("no_server_creds", func(t *testing.T) {
		compareWithGRPCGo(t, func(*testing.T) credsSetup {
			return credsSetup{client: insecure.NewCredentials()}
		}, func(t *testing.T, ref credsObservation) {
			if !ref.ServerUnary.Found || ref.ServerUnary.AuthType != "" || ref.ClientUnary.AuthType != "insecure" {
				t.Errorf("%+v", ref)
			}
		})
	})
}

// TestLocalCredentials: credentials/local on both roles give both sides a
// "local" AuthInfo, with NoSecurity over loopback TCP and
// PrivacyAndIntegrity over a Unix socket.
func TestLocalCredentials(t *testing.T) {
	for _, unix := range []bool{false, true} {
		name, level := "tcp", credentials.NoSecurity
		if unix {
			name, level = "unix", credentials.PrivacyAndIntegrity
		}
		t.Run(name, func(t *testing.T) {
			compareWithGRPCGo(t, func(*testing.T) credsSetup {
				return credsSetup{server: local.NewCredentials(), client: local.NewCredentials(), unix: unix}
			}, func(t *testing.T, o credsObservation) {
				for _, v := range []peerView{o.ServerUnary, o.ServerStream, o.ClientUnary, o.ClientStream} {
					if v.AuthType != "local" || v.Level != level || v.AddrNet != name {
						t.Errorf("%+v", v)
					}
				}
			})
		})
	}
}

// TestSecureCredsNeedSecureTransport: per-RPC credentials that require
// transport security go only over a connection whose security level is
// privacy and integrity. As dial options they make a lower level's
// connection fail (Unavailable); as a call option they fail the call
// (Unauthenticated) before asking the credentials for metadata. Local
// credentials are below that level over TCP and at it over a Unix socket;
// TLS is at it.
func TestSecureCredsNeedSecureTransport(t *testing.T) {
	secure := tokenCreds{token: "t", secure: true}
	tlsSetup := serverTLSSetup
	localSetup := func(unix bool) func(*testing.T) credsSetup {
		return func(*testing.T) credsSetup {
			return credsSetup{server: local.NewCredentials(), client: local.NewCredentials(), unix: unix}
		}
	}
	insecureSetup := func(*testing.T) credsSetup {
		return credsSetup{client: insecure.NewCredentials()}
	}
	asDialOption := func(setup func(*testing.T) credsSetup) func(*testing.T) credsSetup {
		return func(t *testing.T) credsSetup {
			cs := setup(t)
			cs.dialOpts = append(cs.dialOpts, leangrpc.WithPerRPCCredentials(secure))
			cs.grpcDialOpts = append(cs.grpcDialOpts, grpc.WithPerRPCCredentials(secure))
			return cs
		}
	}
	asCallOption := func(setup func(*testing.T) credsSetup) func(*testing.T) credsSetup {
		return func(t *testing.T) credsSetup {
			cs := setup(t)
			cs.callOpts = append(cs.callOpts, grpc.PerRPCCredentials(secure))
			return cs
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(*testing.T) credsSetup
		want  codes.Code
	}{
		{"dial_option/tls", asDialOption(tlsSetup), codes.OK},
		{"dial_option/local_tcp", asDialOption(localSetup(false)), codes.Unavailable},
		{"dial_option/local_unix", asDialOption(localSetup(true)), codes.OK},
		{"call_option/tls", asCallOption(tlsSetup), codes.OK},
		{"call_option/local_tcp", asCallOption(localSetup(false)), codes.Unauthenticated},
		{"call_option/local_unix", asCallOption(localSetup(true)), codes.OK},
		{"call_option/insecure", asCallOption(insecureSetup), codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			compareWithGRPCGo(t, tc.setup, func(t *testing.T, o credsObservation) {
				if o.UnaryCode != tc.want || o.StreamCode != tc.want {
					t.Errorf("unary %v (%s), streaming %v (%s), want %v", o.UnaryCode, o.unaryMsg, o.StreamCode, o.streamMsg, tc.want)
				}
			})
		})
	}
}

// TestSchemeFollowsCredentials: the :scheme a client sends is "https"
// only over TLS credentials and "http" otherwise, local credentials
// included, as grpc-go's client sends it.
func TestSchemeFollowsCredentials(t *testing.T) {
	serverCert := tlsKeyPair(t, "x509/server1_cert.pem", "x509/server1_key.pem")
	tlsClient := credentials.NewTLS(&tls.Config{RootCAs: tlsCAPool(t, "x509/server_ca_cert.pem"), ServerName: "x.test.example.com"})
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		tls   bool
		want  string
	}{
		{"insecure", insecure.NewCredentials(), false, "http"},
		{"local", local.NewCredentials(), false, "http"},
		{"tls", tlsClient, true, "https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, lean := range []bool{false, true} {
				var serverTLS *tls.Config
				if tc.tls {
					serverTLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, NextProtos: []string{"h2"}}
				}
				got := requestScheme(t, lean, tc.creds, serverTLS)
				if got != tc.want {
					t.Errorf("lean client %v: :scheme %q, want %q (grpc-go's)", lean, got, tc.want)
				}
			}
		})
	}
}

// requestScheme makes one call with a client of the given stack and
// credentials to a bare HTTP/2 listener (TLS when serverTLS is set) and
// returns the :scheme of the request's HEADERS.
func requestScheme(t *testing.T, lean bool, creds credentials.TransportCredentials, serverTLS *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	scheme := make(chan string, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			scheme <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		if serverTLS != nil {
			c = tls.Server(c, serverTLS)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
			scheme <- "preface: " + err.Error()
			return
		}
		fr := http2.NewFramer(c, c)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.WriteSettings()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				scheme <- "read: " + err.Error()
				return
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok {
				scheme <- h.PseudoValue("scheme")
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if lean {
		cc, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{})
	} else {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{})
	}
	return receive(t, scheme)
}

// dispatchingCreds are server credentials that take every connection away
// from gRPC (credentials.ErrConnDispatched), handing it to dispatched.
type dispatchingCreds struct {
	credentials.TransportCredentials // the client side and Info: insecure's
	dispatched                       chan net.Conn
}

func (c dispatchingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c.dispatched <- raw
	return nil, nil, credentials.ErrConnDispatched
}

// TestConnDispatchedStaysOpen: a connection the server's credentials
// dispatched away from gRPC is left open and without the handshake's
// deadline, on both stacks: its new owner can still use it after the
// connection timeout.
func TestConnDispatchedStaysOpen(t *testing.T) {
	for _, lean := range []bool{false, true} {
		name := "grpc-server"
		if lean {
			name = "lean-server"
		}
		t.Run(name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			creds := dispatchingCreds{insecure.NewCredentials(), make(chan net.Conn, 1)}
			const timeout = 50 * time.Millisecond
			done := make(chan struct{})
			if lean {
				s := leangrpc.NewServer(leangrpc.Creds(creds), leangrpc.ConnectionTimeout(timeout))
				go func() { defer close(done); s.Serve(lis) }()
				defer func() { s.Stop(); <-done }()
			} else {
				s := grpc.NewServer(grpc.Creds(creds), grpc.ConnectionTimeout(timeout))
				go func() { defer close(done); s.Serve(lis) }()
				defer func() { s.Stop(); <-done }()
			}
			c, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			taken := receive(t, creds.dispatched)
			defer taken.Close()
			time.Sleep(3 * timeout)
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			taken.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 4)
			if _, err := io.ReadFull(taken, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("dispatched conn read %q, %v; want ping", buf, err)
			}
		})
	}
}
