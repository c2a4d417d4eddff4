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
// stops gracefully on SIGINT or SIGTERM. With -use_tls it serves TLS with
// grpc-go's credentials, by default with grpc-go's test certificate
// (testdata/server1.pem, valid for *.test.google.fr), as grpc-go's server
// does.
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
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/interop"
	"google.golang.org/grpc/testdata"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

var (
	host     = flag.String("host", "127.0.0.1", "The address to listen on; keep it a loopback address")
	port     = flag.Int("port", 10000, "The server port; 0 picks a free one, printed on stderr")
	useTLS   = flag.Bool("use_tls", false, "Connection uses TLS if true, else plain TCP")
	certFile = flag.String("tls_cert_file", "", "The TLS cert file; empty means grpc-go's testdata/server1.pem")
	keyFile  = flag.String("tls_key_file", "", "The TLS key file; empty means grpc-go's testdata/server1.key")

	// maxStreams gives the server a finite SETTINGS_MAX_CONCURRENT_STREAMS,
	// which h2spec needs to test the limit.
	maxStreams = flag.Uint("max_concurrent_streams", 0, "Streams each client may open at once; 0 keeps the library default")

	// Accepted so that grpc-go's command lines work; ALTS is not
	// supported, so the address only matters together with -use_alts.
	_       = flag.String("alts_handshaker_service_address", "", "Ignored: ALTS is not supported")
	useALTS = flag.Bool("use_alts", false, "Connection uses ALTS if true (not supported)")

	// cpuProfile serves the server benchmark (bench/servers), which
	// profiles this program under load; the profile is written when the
	// server stops on a signal.
	cpuProfile = flag.String("cpuprofile", "", "Write a CPU profile to this file until the server stops")
	// memStats serves the server benchmark too: it counts allocations
	// per request from the totals.
	memStats = flag.Bool("memstats", false, "Log the process's heap allocation totals when the server stops")
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
	if *useTLS && *useALTS {
		log.Fatalf("-use_tls and -use_alts cannot be both set to true")
	}
	if *useALTS {
		log.Fatalf("-use_alts: ALTS is not supported")
	}
	var creds credentials.TransportCredentials
	if *useTLS {
		var err error
		if creds, err = serverTLS(*certFile, *keyFile); err != nil {
			log.Fatalf("TLS credentials: %v", err)
		}
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatalf("cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatalf("cpuprofile: %v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				log.Printf("cpuprofile: %v", err)
			}
		}()
	}
	s := newServer(uint32(*maxStreams), creds)
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
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
	// Serve returns as soon as a stop begins; waiting for the stop to end
	// lets the deferred profile and the totals cover the whole run.
	<-stopped
	if *memStats {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		log.Printf("memstats: mallocs %d bytes %d gc %d", ms.Mallocs, ms.TotalAlloc, ms.NumGC)
	}
}

// serverTLS returns grpc-go's TLS credentials for the key pair in certFile
// and keyFile, defaulting to grpc-go's test certificate as its interop
// server does. grpc-go's credentials offer ALPN "h2" and refuse a client
// that negotiates none.
func serverTLS(certFile, keyFile string) (credentials.TransportCredentials, error) {
	if certFile == "" {
		certFile = testdata.Path("server1.pem")
	}
	if keyFile == "" {
		keyFile = testdata.Path("server1.key")
	}
	return credentials.NewServerTLSFromFile(certFile, keyFile)
}
