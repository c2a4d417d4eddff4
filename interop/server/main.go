// Binary server is the gRPC interop server running on leangrpc.
//
// It serves grpc.testing.TestService with grpc-go's own implementation
// (interop.NewTestServer) on a leangrpc.Server, and accepts the flags of
// grpc-go's interop server (interop/server in google.golang.org/grpc) so the
// same harness drives both. UnimplementedService is not registered, as in
// grpc-go's server: the unimplemented_service case expects the server to
// answer an unknown service with Unimplemented.
//
// It listens on -host (127.0.0.1 by default, loopback only) and -port, and
// stops gracefully on SIGINT or SIGTERM. Only plaintext is supported for now.
//
// Built with the grpcgo_transport tag, the same program runs on grpc-go's
// transport instead; the interop test suite uses that build to check this
// program's own logic independently of leangrpc.
package main

import (
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/interop"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

var (
	host   = flag.String("host", "127.0.0.1", "The address to listen on; keep it a loopback address")
	port   = flag.Int("port", 10000, "The server port; 0 picks a free one, printed on stderr")
	useTLS = flag.Bool("use_tls", false, "Connection uses TLS if true (not supported yet)")

	// maxStreams gives the server a finite SETTINGS_MAX_CONCURRENT_STREAMS,
	// which h2spec needs to test the limit.
	maxStreams = flag.Uint("max_concurrent_streams", 0, "Streams each client may open at once; 0 keeps the library default")

	// Accepted so that grpc-go's command lines work; TLS and ALTS are not
	// supported, so a non-empty value only matters together with -use_tls.
	_       = flag.String("tls_cert_file", "", "Ignored: TLS is not supported yet")
	_       = flag.String("tls_key_file", "", "Ignored: TLS is not supported yet")
	_       = flag.String("alts_handshaker_service_address", "", "Ignored: ALTS is not supported")
	useALTS = flag.Bool("use_alts", false, "Connection uses ALTS if true (not supported)")
)

// server is what newServer returns: a leangrpc.Server, or a grpc.Server
// when built with the grpcgo_transport tag.
type server interface {
	grpc.ServiceRegistrar
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// stopGrace bounds how long a signalled server waits for in-flight RPCs.
const stopGrace = 5 * time.Second

func main() {
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("interop server (" + transportName + "): ")
	if *useTLS || *useALTS {
		log.Fatalf("-use_tls / -use_alts: only plaintext is supported yet")
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	s := newServer(uint32(*maxStreams))
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		log.Printf("stopping")
		t := time.AfterFunc(stopGrace, s.Stop)
		s.GracefulStop()
		t.Stop()
	}()

	log.Printf("listening on %v", lis.Addr())
	if err := s.Serve(lis); err != nil {
		log.Fatalf("Serve: %v", err)
	}
}
