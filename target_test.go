package leangrpc_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
)

// stackClient is what the target tests need of either stack's ClientConn.
type stackClient interface {
	grpc.ClientConnInterface
	CanonicalTarget() string
	Close() error
}

// newStackClient makes a plaintext client of the given stack for target,
// with resolvers given by WithResolvers.
func newStackClient(lean bool, target string, rs ...resolver.Builder) (stackClient, error) {
	if lean {
		cc, err := leangrpc.NewClient(target, leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithResolvers(rs...))
		if err != nil {
			return nil, err
		}
		return cc, nil
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rs...))
	if err != nil {
		return nil, err
	}
	return cc, nil
}

// nopBuilder is a resolver that never reports, for parsing tests.
type nopBuilder struct{ scheme string }

func (b nopBuilder) Build(resolver.Target, resolver.ClientConn, resolver.BuildOptions) (resolver.Resolver, error) {
	return nopResolver{}, nil
}
func (b nopBuilder) Scheme() string { return b.scheme }

type nopResolver struct{}

func (nopResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (nopResolver) Close()                                {}

// TestTargetParsing: every target string gets the same CanonicalTarget, or
// the same error, from leangrpc's NewClient as from grpc-go's.
func TestTargetParsing(t *testing.T) {
	targets := []string{
		"localhost:50051",
		"127.0.0.1:50051",
		"[::1]:50051",
		"[fe80::1%eth0]:50051",
		":50051",
		"example.com",
		"dns:example.com:443",
		"dns:///example.com:443",
		"dns://8.8.8.8/example.com:443",
		"dns://8.8.8.8:53/example.com:443",
		"DNS:///example.com:443",
		"unix:/tmp/s.sock",
		"unix:///tmp/s.sock",
		"unix://tmp/s.sock",
		"unix:relative/s.sock",
		"unix-abstract:name",
		"unix-abstract:///name",
		"passthrough:///10.0.0.1:80",
		"passthrough:10.0.0.1:80",
		"passthrough:///",
		"custom:///svc",
		"custom://auth/svc?x=1",
		"unknown:///svc",
		"http://example.com:80/",
		"a/b:1",
		"host name:1",
		"%zz",
		"dns:///%zz",
		"[::1",
		"",
	}
	for _, target := range targets {
		lc, lerr := newStackClient(true, target, nopBuilder{"custom"})
		gc, gerr := newStackClient(false, target, nopBuilder{"custom"})
		switch {
		case (lerr != nil) != (gerr != nil):
			t.Errorf("%q: leangrpc error %v, grpc-go error %v", target, lerr, gerr)
		case lerr != nil:
			t.Logf("%q: error %v", target, lerr)
			if lerr.Error() != gerr.Error() {
				t.Errorf("%q: leangrpc error %q, grpc-go error %q", target, lerr, gerr)
			}
		default:
			if l, g := lc.CanonicalTarget(), gc.CanonicalTarget(); l != g {
				t.Errorf("%q: CanonicalTarget %q, grpc-go %q", target, l, g)
			} else {
				t.Logf("%q: %q", target, l)
			}
		}
		if lc != nil {
			lc.Close()
		}
		if gc != nil {
			gc.Close()
		}
	}
}

// authorityServer is a leangrpc test server on lis that answers every
// EmptyCall with the :authority it received in the "authority" header.
func authorityServer(t *testing.T, lis net.Listener) {
	t.Helper()
	s := leangrpc.NewServer(leangrpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		grpc.SetHeader(ctx, metadata.Pairs("authority", strings.Join(md.Get(":authority"), ",")))
		return h(ctx, req)
	}))
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })
}

// callAuthority makes one EmptyCall and returns the :authority the server
// saw.
func callAuthority(t *testing.T, cc grpc.ClientConnInterface) (string, error) {
	var hdr metadata.MD
	_, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{}, grpc.Header(&hdr))
	return strings.Join(hdr.Get("authority"), ","), err
}

// TestTargetCalls: calls to a target reach the server, over TCP and Unix
// sockets, with the :authority grpc-go's client sends for the same target.
func TestTargetCalls(t *testing.T) {
	base, bufs := baseline()
	t.Run("body", testTargetCalls)
	checkGoroutines(t, base)
	checkBuffers(t, bufs)
}

func testTargetCalls(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	authorityServer(t, tcp)
	portStr := tcp.Addr().String()[strings.LastIndexByte(tcp.Addr().String(), ':'):]

	targets := []string{
		tcp.Addr().String(),
		"localhost" + portStr,
		"dns:///localhost" + portStr,
		"dns:///" + tcp.Addr().String(),
		"dns:" + tcp.Addr().String(),
		"passthrough:///" + tcp.Addr().String(),
	}
	if runtime.GOOS != "windows" { // Unix sockets and their paths as on Unix
		dir := t.TempDir()
		sock := filepath.Join(dir, "s.sock")
		ul, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		authorityServer(t, ul)
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(wd, sock)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets,
			"passthrough:///unix://"+sock,
			"unix://"+sock,
			"unix:"+sock,
			"unix:"+rel,
		)
	}
	if runtime.GOOS == "linux" {
		name := "leangrpc-" + filepath.Base(filepath.Dir(t.TempDir()))
		al, err := net.Listen("unix", "@"+name)
		if err != nil {
			t.Fatal(err)
		}
		authorityServer(t, al)
		targets = append(targets, "unix-abstract:"+name)
	}
	for _, target := range targets {
		var got [2]string
		for i, lean := range []bool{true, false} {
			cc, err := newStackClient(lean, target)
			if err != nil {
				t.Fatalf("%q (lean %v): %v", target, lean, err)
			}
			got[i], err = callAuthority(t, cc)
			cc.Close()
			if err != nil {
				t.Errorf("%q (lean %v): %v", target, lean, err)
			}
		}
		t.Logf("%q: :authority %q", target, got[0])
		if got[0] != got[1] {
			t.Errorf("%q: leangrpc sent :authority %q, grpc-go %q", target, got[0], got[1])
		}
	}
}

// TestTargetDialerAddress: a WithContextDialer function is given the same
// address for a target by both stacks; for the unix resolvers that is the
// address written as a unix target again, as grpc-go hands it on.
func TestTargetDialerAddress(t *testing.T) {
	base, bufs := baseline()
	targets := []string{
		"127.0.0.1:1",
		"passthrough:///bufnet",
		"passthrough:///unix:///tmp/x.sock",
		"unix:///tmp/x.sock",
		"unix:/tmp/x.sock",
		"unix:relative.sock",
		"unix-abstract:name",
	}
	for _, target := range targets {
		var got [2]string
		for i, lean := range []bool{true, false} {
			seen := make(chan string, 1)
			dialer := func(_ context.Context, addr string) (net.Conn, error) {
				select {
				case seen <- addr:
				default:
				}
				return nil, errors.New("refused by the test")
			}
			var cc stackClient
			var err error
			if lean {
				cc, err = leangrpc.NewClient(target, leangrpc.WithTransportCredentials(insecure.NewCredentials()), leangrpc.WithContextDialer(dialer))
			} else {
				cc, err = grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer))
			}
			if err != nil {
				t.Fatalf("%q: %v", target, err)
			}
			testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testpb.Empty{})
			select {
			case got[i] = <-seen:
			case <-time.After(5 * time.Second):
				t.Errorf("%q (lean %v): the dialer was not called", target, lean)
			}
			cc.Close()
		}
		t.Logf("%q: dialer got %q", target, got[0])
		if got[0] != got[1] {
			t.Errorf("%q: leangrpc's dialer got %q, grpc-go's %q", target, got[0], got[1])
		}
	}
	checkGoroutines(t, base)
	checkBuffers(t, bufs)
}
