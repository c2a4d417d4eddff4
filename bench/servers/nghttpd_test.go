package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc/interop"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// TestStaticAnswerIsLeangrpcAnswer checks nghttpd's static file against
// what a leangrpc server with the benchmark's interop service sends as
// DATA for h2load's request, byte for byte, so the floor serves exactly
// the answer the gRPC servers compute.
func TestStaticAnswerIsLeangrpcAnswer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(lis)
	defer s.Stop()

	root := nghttpdDocRoot(t.TempDir())
	if err := writeNghttpdDocRoot(root, 16); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(root, "grpc.testing.TestService", "UnaryCall"))
	if err != nil {
		t.Fatal(err)
	}
	for _, payload := range []int{0, 16, 1000} {
		body, trailer, err := postUnaryH2C(context.Background(), lis.Addr().String(), payload)
		if err != nil {
			t.Fatalf("%d-byte payload: %v", payload, err)
		}
		if got := trailer.Get("grpc-status"); got != "0" {
			t.Errorf("%d-byte payload: grpc-status %q", payload, got)
		}
		if want := unaryResponseFrame(payload); !bytes.Equal(body, want) {
			t.Errorf("%d-byte payload: leangrpc answered % x, the static answer is % x", payload, body, want)
		}
		if payload == 16 && !bytes.Equal(body, file) {
			t.Errorf("nghttpd's file holds % x, leangrpc answered % x", file, body)
		}
	}
}

// TestNghttpdServesStaticAnswer runs the benchmark's nghttpd, when it is
// installed, through the check that comes before its runs.
func TestNghttpdServesStaticAnswer(t *testing.T) {
	bin, err := exec.LookPath("nghttpd")
	if err != nil {
		t.Skip("nghttpd is not installed (Debian: nghttp2-server); its static answer is checked against leangrpc's only")
	}
	o := options{streams: 50, payload: 16, binDir: t.TempDir()}
	if err := writeNghttpdDocRoot(nghttpdDocRoot(o.binDir), o.payload); err != nil {
		t.Fatal(err)
	}
	srv, err := startNghttpd(context.Background(), o, bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyStaticAnswer(context.Background(), srv.addr, o.payload); err != nil {
		t.Error(err)
	}
	// A gRPC client rejects the answer, which is why nghttpd has a check of
	// its own.
	if err := verifyUnary(context.Background(), srv.addr, o.payload); err == nil {
		t.Error("a gRPC client accepted nghttpd's answer; verifyAnswer could use verifyUnary for it")
	}
	if err := srv.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

func TestNghttpdArgs(t *testing.T) {
	got := strings.Join(nghttpdArgs(options{streams: 50}, "/d", 8080), " ")
	if want := "--no-tls -a 127.0.0.1 -d /d -n 2 -m 100 --trailer grpc-status: 0 8080"; got != want {
		t.Errorf("nghttpd args %q, want %q", got, want)
	}
	if got := nghttpdArgs(options{streams: 500}, "/d", 8080); got[8] != "500" {
		t.Errorf("nghttpd args with h2load -m 500: %q", got)
	}
}
