package leangrpc_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// HTTP/2 over TLS requires ALPN "h2" (RFC 9113 §3.2). grpc-go's TLS
// credentials offer it on both roles and, since v1.67, refuse a peer that
// negotiated no protocol unless GRPC_ENFORCE_ALPN_ENABLED=false. leangrpc
// runs those credentials' handshakes unchanged, so it must refuse the same
// peers the same way; these tests hold it to that, and run once more in a
// child process with the variable set to false.

// alpnEnforced reports whether grpc-go enforces ALPN in this process, read
// from the environment as grpc-go reads it.
func alpnEnforced() bool {
	return !strings.EqualFold(os.Getenv("GRPC_ENFORCE_ALPN_ENABLED"), "false")
}

// rawTLSOutcome is what a crypto/tls client offering protos saw from a
// gRPC server: the handshake's error, or the type of the first HTTP/2
// frame, or how the connection ended before any.
func rawTLSOutcome(t *testing.T, addr string, protos []string) string {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{
		RootCAs:    tlsCAPool(t, "x509/server_ca_cert.pem"),
		ServerName: "x.test.example.com",
		NextProtos: protos,
	})
	if err != nil {
		return "handshake: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var hdr [9]byte // an HTTP/2 frame header: the server's SETTINGS
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		switch {
		case errors.Is(err, io.EOF):
			return "closed without a byte"
		case errors.Is(err, io.ErrUnexpectedEOF):
			return "closed after a partial frame header"
		}
		return "read: " + err.Error()
	}
	if hdr[3] == 0x4 {
		return "SETTINGS frame"
	}
	return fmt.Sprintf("a frame of type %d", hdr[3])
}

// TestServerRequiresALPN: a TLS client that offers no ALPN completes its
// TLS 1.3 handshake and then finds the connection closed without a byte of
// HTTP/2. So does one that offers only http/1.1, which crypto/tls lets an
// h2 server accept as if it offered nothing; one that offers another
// protocol alone fails the handshake with crypto/tls's alert; one that
// offers h2 gets the server's SETTINGS. Both stacks behave the same.
func TestServerRequiresALPN(t *testing.T) {
	want := map[string]string{
		"none":     "closed without a byte",
		"http/1.1": "closed without a byte",
		"spdy/3":   "handshake: remote error: tls: no application protocol",
		"h2":       "SETTINGS frame",
	}
	if !alpnEnforced() {
		want["none"] = "SETTINGS frame"
		want["http/1.1"] = "SETTINGS frame"
	}
	offers := map[string][]string{"none": nil, "http/1.1": {"http/1.1"}, "spdy/3": {"spdy/3"}, "h2": {"h2"}}
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{tlsKeyPair(t, "x509/server1_cert.pem", "x509/server1_key.pem")}})
	for _, lean := range []bool{true, false} {
		name := "grpc-server"
		if lean {
			name = "lean-server"
		}
		t.Run(name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var stop func()
			if lean {
				s := leangrpc.NewServer(leangrpc.Creds(creds))
				testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
				go s.Serve(lis)
				stop = s.Stop
			} else {
				s := grpc.NewServer(grpc.Creds(creds))
				testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
				go s.Serve(lis)
				stop = s.Stop
			}
			for offer, protos := range offers {
				if got := rawTLSOutcome(t, lis.Addr().String(), protos); got != want[offer] {
					t.Errorf("client offering ALPN %s: %s, want %s", offer, got, want[offer])
				}
			}
			stop()
			if lean {
				checkGoroutines(t, base)
			}
		})
	}
}

// TestClientRequiresALPN: a TLS server that selects no ALPN protocol (here
// a gRPC server behind a crypto/tls listener configured without any) is
// refused by the client with Unavailable and grpc-go's message, on both
// stacks.
func TestClientRequiresALPN(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	noALPN := tls.NewListener(lis, &tls.Config{Certificates: []tls.Certificate{tlsKeyPair(t, "x509/server1_cert.pem", "x509/server1_key.pem")}})
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(noALPN)
	defer s.Stop()

	creds := credentials.NewTLS(&tls.Config{RootCAs: tlsCAPool(t, "x509/server_ca_cert.pem"), ServerName: "x.test.example.com"})
	call := func(t *testing.T, lean bool) error {
		var cc grpc.ClientConnInterface
		if lean {
			c, err := leangrpc.NewClient(lis.Addr().String(), leangrpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cc = c
		} else {
			c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cc = c
		}
		_, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctxT(t), &testpb.SimpleRequest{})
		return err
	}
	const alpnMissing = "credentials: cannot check peer: missing selected ALPN property"
	for _, lean := range []bool{true, false} {
		name := "grpc-client"
		if lean {
			name = "lean-client"
		}
		t.Run(name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			err := call(t, lean)
			if !alpnEnforced() {
				if err != nil {
					t.Errorf("with ALPN enforcement off: %v, want success", err)
				}
				return
			}
			if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), alpnMissing) {
				t.Errorf("call to a server without ALPN: %v, want Unavailable with %q", err, alpnMissing)
			}
			if lean {
				checkGoroutines(t, base)
			}
		})
	}
}

// TestALPNEnforcementOff runs the two tests above in a child process with
// GRPC_ENFORCE_ALPN_ENABLED=false, where grpc-go's credentials let a peer
// without ALPN through, and leangrpc must then serve and call it.
func TestALPNEnforcementOff(t *testing.T) {
	if !alpnEnforced() {
		t.Skip("already the child process")
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	tests := "^(TestServerRequiresALPN|TestClientRequiresALPN)$"
	cmd := exec.Command(os.Args[0], "-test.run="+tests, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "GRPC_ENFORCE_ALPN_ENABLED=false")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child with GRPC_ENFORCE_ALPN_ENABLED=false: %v\n%s", err, out)
	}
	for _, name := range []string{"TestServerRequiresALPN", "TestClientRequiresALPN"} {
		if !bytes.Contains(out, []byte("--- PASS: "+name+" ")) {
			t.Errorf("child did not pass %s:\n%s", name, out)
		}
	}
}
