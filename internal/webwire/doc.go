// Package webwire carries gRPC calls over the protocols a browser or an
// HTTP/1.1 client can speak: gRPC-Web (binary and base64 text) and the
// Connect protocol (unary and streaming), and gRPC itself when net/http
// owns the connection (Server.ServeHTTP).
//
// A web request is translated into the gRPC request it stands for (header
// fields as a gRPC client would have sent them), so that grpcwire parses
// and serves every protocol with one implementation of a call's rules; the
// Transport translates the call's answer (response header fields, messages
// in gRPC's framing, the status as trailer fields) back into the request's
// protocol. A Carrier is where the bytes go: one of the engine's HTTP/2
// streams, or net/http's ResponseWriter and Request.
package webwire
