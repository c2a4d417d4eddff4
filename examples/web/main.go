// Command web serves, on one port, grpc-go's unchanged Echo service (from
// google.golang.org/grpc/examples) to gRPC, gRPC-Web and Connect clients,
// and a page whose JavaScript calls it from the browser with both web
// protocols (@connectrpc/connect-web). The page is built by npm (see
// README.md) into dist/, which leangrpc.HTTPHandler serves: every request
// that is not a call of the Echo service goes to it.
//
//	npm ci --ignore-scripts && npm run build
//	go run . -addr 127.0.0.1:8080
//	# open http://127.0.0.1:8080/
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	pb "google.golang.org/grpc/examples/features/proto/echo"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	dist := flag.String("dist", "dist", "directory of the built page (npm run build)")
	cors := flag.String("cors", "", "comma-separated origins whose pages may call the service cross-origin (e.g. http://localhost:3000)")
	certFile := flag.String("cert", "", "TLS certificate (PEM) to serve HTTPS with; browsers speak HTTP/2 only over TLS")
	keyFile := flag.String("key", "", "the certificate's key (PEM)")
	flag.Parse()

	if _, err := os.Stat(filepath.Join(*dist, "index.html")); err != nil {
		log.Printf("warning: %v: build the page first with `npm ci --ignore-scripts && npm run build`", err)
	}
	var opts []leangrpc.ServerOption
	if *cors != "" {
		opts = append(opts, leangrpc.CORSOrigins(strings.Split(*cors, ",")...))
	}
	scheme := "http"
	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			log.Fatal(err)
		}
		opts = append(opts, tlsCreds(cert))
		scheme = "https"
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := newServer(http.FileServer(http.Dir(*dist)), opts...)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	log.Printf("serving the page and the Echo service on %s://%s/", scheme, lis.Addr())
	if err := srv.Serve(lis); err != nil && !errors.Is(err, leangrpc.ErrServerStopped) {
		log.Fatal(err)
	}
}

// newServer is a leangrpc server with the Echo service, serving page (any
// http.Handler) for every request that is not an Echo call.
func newServer(page http.Handler, opts ...leangrpc.ServerOption) *leangrpc.Server {
	srv := leangrpc.NewServer(append([]leangrpc.ServerOption{leangrpc.HTTPHandler(page)}, opts...)...)
	pb.RegisterEchoServer(srv, echoServer{}) // as with grpc.NewServer()
	return srv
}

// tlsCreds serves TLS with cert: HTTP/2 (gRPC, and what browsers use for
// the page and the web protocols over TLS) and HTTP/1.1, as ALPN chooses.
func tlsCreds(cert tls.Certificate) leangrpc.ServerOption {
	return leangrpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"},
	}))
}

// echoServer is a plain grpc-go service: nothing in it knows which
// protocol a call came with (responseHeader reports it only so that the
// page can check it). The message "fail" makes a call fail with a status
// that has an errdetails.ErrorInfo detail; "slow" makes the server stream
// long, for the page to cancel it.
type echoServer struct {
	pb.UnimplementedEchoServer
}

func (echoServer) UnaryEcho(ctx context.Context, in *pb.EchoRequest) (*pb.EchoResponse, error) {
	grpc.SetHeader(ctx, responseHeader(ctx))
	grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "bye"))
	if in.GetMessage() == "fail" {
		return nil, failure(in)
	}
	return &pb.EchoResponse{Message: in.GetMessage()}, nil
}

// ServerStreamingEcho sends the message back five times, numbered; with
// "fail" it fails after two; with "slow" it sends it a hundred times, one
// every 100 ms, and ends with the status Canceled when the client cancels.
func (echoServer) ServerStreamingEcho(in *pb.EchoRequest, stream grpc.ServerStreamingServer[pb.EchoResponse]) error {
	ctx := stream.Context()
	stream.SetHeader(responseHeader(ctx))
	stream.SetTrailer(metadata.Pairs("x-trailer", "bye"))
	if in.GetMessage() == "slow" {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 1; i <= 100; i++ {
			if err := stream.Send(&pb.EchoResponse{Message: fmt.Sprintf("slow %d", i)}); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			case <-tick.C:
			}
		}
		return nil
	}
	for i := 1; i <= 5; i++ {
		if in.GetMessage() == "fail" && i == 3 {
			return failure(in)
		}
		if err := stream.Send(&pb.EchoResponse{Message: fmt.Sprintf("%s %d", in.GetMessage(), i)}); err != nil {
			return err
		}
	}
	return nil
}

// failure is the status of a failed call: a code, a message (not ASCII,
// to show that it arrives whole) and a detail.
func failure(in *pb.EchoRequest) error {
	st, err := status.New(codes.InvalidArgument, "échec: the message was “fail”").WithDetails(&errdetails.ErrorInfo{
		Reason:   "ECHO_REFUSED",
		Domain:   "example.leangrpc",
		Metadata: map[string]string{"message": in.GetMessage()},
	})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return st.Err()
}

// responseHeader is the response metadata every call sends: the request's
// x-greeting and x-blob-bin (binary metadata: base64 on the wire, bytes
// here) echoed, the protocol of the call, and the time left before the
// deadline the client set, if any.
func responseHeader(ctx context.Context) metadata.MD {
	in, _ := metadata.FromIncomingContext(ctx)
	md := metadata.Pairs("x-protocol", leangrpc.ProtocolFromContext(ctx))
	if v := in.Get("x-greeting"); len(v) > 0 {
		md.Set("x-echo-greeting", v...)
	}
	if v := in.Get("x-blob-bin"); len(v) > 0 {
		md.Set("x-blob-bin", v...)
	}
	if d, ok := ctx.Deadline(); ok {
		md.Set("x-deadline-ms", strconv.FormatInt(time.Until(d).Milliseconds(), 10))
	}
	return md
}
