package grpcgo

import (
	"strings"
	"testing"
)

func renamesFor(t *testing.T, r Rules) Renames {
	t.Helper()
	m, err := RenamesFor(goList(t, "google.golang.org/grpc"), r)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRenamesFromGRPCSource(t *testing.T) {
	both := renamesFor(t, Rules{Server: true, Client: true})
	for _, n := range []string{"NewServer", "KeepaliveParams", "Creds", "NewClient", "Dial", "DialContext", "WithTransportCredentials", "WithDefaultServiceConfig", "WithResolvers", "ClientConn", "DialOption"} {
		if both[n] != n {
			t.Errorf("renames[%q] = %q, want %q", n, both[n], n)
		}
	}
	// Call options and everything else stay grpc-go's.
	for _, n := range []string{"WaitForReady", "Peer", "Header", "ServiceRegistrar", "ClientConnInterface"} {
		if _, ok := both[n]; ok {
			t.Errorf("%s renamed, want it left to grpc-go", n)
		}
	}
	server := renamesFor(t, Rules{Server: true})
	if _, ok := server["WithTransportCredentials"]; ok {
		t.Error("server rules rename a DialOption constructor")
	}
	client := renamesFor(t, Rules{Client: true})
	if _, ok := client["NewServer"]; ok {
		t.Error("client rules rename NewServer")
	}
}

func TestConvert(t *testing.T) {
	both := renamesFor(t, Rules{Server: true, Client: true})
	for _, c := range []struct {
		name, src string
		want      []string // lines the result must hold
		notWant   []string
	}{{
		name: "server",
		src: `package main

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

func main() {
	s := grpc.NewServer(grpc.KeepaliveParams(keepalive.ServerParameters{}))
	_ = s
}
`,
		want:    []string{`"github.com/leangrpc/leangrpc"`, `s := leangrpc.NewServer(leangrpc.KeepaliveParams(keepalive.ServerParameters{}))`},
		notWant: []string{`"google.golang.org/grpc"`},
	}, {
		name: "client keeps grpc-go's call options",
		src: `package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func dial(ctx context.Context) (*grpc.ClientConn, []grpc.CallOption, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	cc, err := grpc.Dial("x", opts...)
	return cc, []grpc.CallOption{grpc.WaitForReady(true)}, err
}
`,
		want: []string{`"github.com/leangrpc/leangrpc"`, `"google.golang.org/grpc"`,
			`func dial(ctx context.Context) (*leangrpc.ClientConn, []grpc.CallOption, error) {`,
			`opts := []leangrpc.DialOption{leangrpc.WithTransportCredentials(insecure.NewCredentials())}`,
			`cc, err := leangrpc.Dial("x", opts...)`,
			`return cc, []grpc.CallOption{grpc.WaitForReady(true)}, err`},
	}, {
		name: "renamed import",
		src: `package main

import (
	g "google.golang.org/grpc"
)

var s = g.NewServer()
`,
		want:    []string{`var s = leangrpc.NewServer()`, `"github.com/leangrpc/leangrpc"`},
		notWant: []string{`g "google.golang.org/grpc"`},
	}, {
		name: "a local named grpc is not the package",
		src: `package main

import (
	"google.golang.org/grpc"
)

type fake struct{ NewServer func() int }

func f() {
	_ = grpc.NewServer()
	grpc := fake{}
	_ = grpc.NewServer()
}
`,
		want: []string{`_ = leangrpc.NewServer()`, `_ = grpc.NewServer()`},
	}} {
		t.Run(c.name, func(t *testing.T) {
			out, err := Convert("main.go", []byte(c.src), both)
			if err != nil {
				t.Fatal(err)
			}
			lines := map[string]bool{}
			for _, l := range strings.Split(string(out), "\n") {
				lines[strings.TrimSpace(l)] = true
			}
			for _, w := range c.want {
				if !lines[w] {
					t.Errorf("no line %q in\n%s", w, out)
				}
			}
			for _, w := range c.notWant {
				if lines[w] {
					t.Errorf("line %q still in\n%s", w, out)
				}
			}
		})
	}
}

func TestConvertLeavesOtherFilesAlone(t *testing.T) {
	src := []byte("package p\n\nimport \"google.golang.org/grpc/codes\"\n\nvar c = codes.OK\n")
	out, err := Convert("p.go", src, renamesFor(t, Rules{Server: true, Client: true}))
	if err != nil || string(out) != string(src) {
		t.Errorf("Convert = %q, %v; want the source unchanged", out, err)
	}
}
