// Command server is the server under test of the Connect conformance suite
// (connectrpc.com/conformance, docs/testing_servers.md): it reads a
// size-delimited ServerCompatRequest from stdin, starts a leangrpc server
// of the ConformanceService as the request asks (TLS, client
// certificates, message receive limit), writes a size-delimited
// ServerCompatResponse with its address to stdout, and serves until the
// runner ends it (SIGTERM).
//
// -mode own serves on leangrpc's own listener (Server.Serve); -mode
// servehttp mounts the Server in a net/http server (Server.ServeHTTP).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/leangrpc/leangrpc"
	v1 "github.com/leangrpc/leangrpc/interop/conformance/internal/conformancev1"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // the suite's gzip cases
	"google.golang.org/protobuf/proto"
)

func main() {
	mode := flag.String("mode", "own", "how leangrpc serves: own (Server.Serve on its own listener) or servehttp (Server.ServeHTTP in net/http)")
	flag.Parse()
	log.SetPrefix("conformance server: ")
	log.SetFlags(0)
	if *mode != "own" && *mode != "servehttp" {
		log.Fatalf("unknown -mode %q (own or servehttp)", *mode)
	}

	var req v1.ServerCompatRequest
	if err := readDelimited(os.Stdin, &req); err != nil {
		log.Fatalf("reading the ServerCompatRequest: %v", err)
	}
	var tlsCfg *tls.Config
	if req.GetUseTls() {
		var err error
		if tlsCfg, err = serverTLS(&req); err != nil {
			log.Fatal(err)
		}
	}

	var opts []leangrpc.ServerOption
	if n := req.GetMessageReceiveLimit(); n > 0 {
		opts = append(opts, leangrpc.MaxRecvMsgSize(int(n)))
	}
	if tlsCfg != nil && *mode == "own" {
		// ALPN picks HTTP/2 or, for HTTP/1.1 clients, net/http.
		tlsCfg.NextProtos = []string{"h2", "http/1.1"}
		opts = append(opts, leangrpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	srv := leangrpc.NewServer(opts...)
	v1.RegisterConformanceServiceServer(srv, conformanceService{})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	resp := &v1.ServerCompatResponse{Host: "127.0.0.1", Port: uint32(lis.Addr().(*net.TCPAddr).Port)}
	if tlsCfg != nil {
		resp.PemCert = req.GetServerCreds().GetCert()
	}

	served := make(chan error, 1)
	var stop func()
	switch *mode {
	case "own":
		go func() { served <- srv.Serve(lis) }()
		stop = srv.Stop
	case "servehttp":
		var protos http.Protocols
		protos.SetHTTP1(true)
		protos.SetHTTP2(true)            // over TLS, by ALPN
		protos.SetUnencryptedHTTP2(true) // h2c with prior knowledge
		hs := &http.Server{Handler: srv, Protocols: &protos, TLSConfig: tlsCfg}
		go func() {
			if tlsCfg != nil {
				served <- hs.ServeTLS(lis, "", "") // the certificate is in TLSConfig
				return
			}
			served <- hs.Serve(lis)
		}()
		stop = func() { hs.Close() }
	}

	if err := writeDelimited(os.Stdout, resp); err != nil {
		log.Fatalf("writing the ServerCompatResponse: %v", err)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	select {
	case <-sig:
		stop()
	case err := <-served:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("serve: %v", err)
		}
	}
}

// serverTLS is the TLS configuration the request asks for: the runner's
// certificate and, when it gives a client certificate, client
// certificates required and verified against it.
func serverTLS(req *v1.ServerCompatRequest) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(req.GetServerCreds().GetCert(), req.GetServerCreds().GetKey())
	if err != nil {
		return nil, fmt.Errorf("server credentials: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if ca := req.GetClientTlsCert(); len(ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("client_tls_cert: no PEM certificate")
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// maxDelimited bounds a size-delimited message read from stdin.
const maxDelimited = 16 << 20

// readDelimited reads one message preceded by its size, a big-endian
// uint32.
func readDelimited(r io.Reader, m proto.Message) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxDelimited {
		return fmt.Errorf("message of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return proto.Unmarshal(b, m)
}

// writeDelimited writes m preceded by its size, a big-endian uint32.
func writeDelimited(w io.Writer, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(out, b...))
	return err
}
