// Package leangrpc is a gRPC transport for Go that runs code written for
// grpc-go: generated stubs, interceptors, status, codes, metadata, codecs and
// credentials. A program switches by changing one constructor:
// grpc.NewServer to leangrpc.NewServer, grpc.NewClient to leangrpc.NewClient.
//
//	srv := leangrpc.NewServer() // was grpc.NewServer()
//	pb.RegisterGreeterServer(srv, &greeter{})
//	go srv.Serve(lis)
//
//	// was grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
//	cc, err := leangrpc.NewClient(target, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
//	client := pb.NewGreeterClient(cc)
//
// Server is a grpc.ServiceRegistrar and ClientConn a
// grpc.ClientConnInterface: code that takes those interfaces, rather than
// *grpc.Server or *grpc.ClientConn, runs unchanged on either stack (see
// the examples).
//
// grpc-go's ServerOption and DialOption types are opaque, so leangrpc
// defines its own option types with the same names: write
// leangrpc.WithTransportCredentials(insecure.NewCredentials()) where grpc-go
// code says grpc.WithTransportCredentials(...), and leangrpc.MaxRecvMsgSize
// for grpc.MaxRecvMsgSize. Call options are grpc-go's own (grpc.Header,
// grpc.WaitForReady, grpc.MaxCallRecvMsgSize, ...): they are passed
// unchanged.
//
// Compression uses grpc-go's compressor registry: import
// google.golang.org/grpc/encoding/gzip (or register any
// encoding.Compressor) and pass grpc.UseCompressor, as with grpc-go. A
// handler that picks the compressor of its responses, or asks which ones
// the client accepts, calls leangrpc.SetSendCompressor and
// leangrpc.ClientSupportedCompressors: grpc-go's functions of those names
// accept only grpc-go's own server stream (leangrpc's call grpc-go's on a
// grpc-go server, so code can use them on both).
//
// Stats handlers (grpc-go's stats.Handler: OpenTelemetry's otelgrpc,
// metrics middleware) are installed with StatsHandler and WithStatsHandler
// and receive the events grpc-go gives them, in its order and with its
// fields (see stats.go for the few differences, and examples/otel).
//
// Client interceptors receive a nil *grpc.ClientConn, since that concrete
// type cannot be built outside grpc-go; everything else they receive is as
// grpc-go passes it.
//
// The root package adapts grpc-go's interfaces (ServiceRegistrar,
// ClientConnInterface, ServerStream, ClientStream) onto internal/grpcwire and
// holds no protocol logic.
package leangrpc
