// Package grpcwire is gRPC over HTTP/2 (grpc/grpc's PROTOCOL-HTTP2): request
// and response header mapping (":path", "grpc-timeout", "-bin" metadata),
// message framing with the 5-byte prefix, and the mapping of status and
// transport errors to grpc-go status errors. It is the single place where a
// transport error becomes a status error.
//
// The pure parts (headers, timeouts, metadata, message prefix and parser,
// status) have no dependency on the connection engine; the stream glue in
// server.go and client.go drives internal/h2conn streams with them.
package grpcwire
