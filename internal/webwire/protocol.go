package webwire

import (
	"strings"
)

// Protocol is the protocol a request speaks.
type Protocol uint8

const (
	// None: not an RPC of any protocol served here.
	None Protocol = iota
	// GRPC is gRPC, served here only under net/http (the engine serves
	// it natively).
	GRPC
	// GRPCWeb is gRPC-Web with binary bodies (application/grpc-web).
	GRPCWeb
	// GRPCWebText is gRPC-Web with base64 bodies
	// (application/grpc-web-text).
	GRPCWebText
	// ConnectUnary is the Connect protocol's unary form: POST with
	// application/<codec>, or GET with the message in the query.
	ConnectUnary
	// ConnectStream is the Connect protocol's streaming form
	// (application/connect+<codec>).
	ConnectStream
)

// String names p as the conformance suite and the ProtocolFromContext
// function do.
func (p Protocol) String() string {
	switch p {
	case GRPC:
		return "grpc"
	case GRPCWeb, GRPCWebText:
		return "grpc-web"
	case ConnectUnary, ConnectStream:
		return "connect"
	}
	return "none"
}

// Web reports whether p is one of the web protocols (not gRPC).
func (p Protocol) Web() bool { return p >= GRPCWeb }

// Classify returns the protocol of a request from its HTTP method,
// content-type and path (with its query), and the codec its messages use
// ("" for none given: proto). An unknown content-type, or a method the
// protocol does not allow, is None. A GET is the Connect protocol's unary
// form when its query names the codec (the encoding parameter the
// protocol requires); other GETs are no call.
func Classify(method, contentType, path string) (Protocol, string) {
	if method == "GET" {
		if i := strings.IndexByte(path, '?'); i >= 0 && hasParam(path[i+1:], "encoding") {
			return ConnectUnary, ""
		}
		return None, ""
	}
	if method != "POST" {
		return None, ""
	}
	ct := strings.ToLower(contentType)
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		// Parameters (charset=utf-8 on JSON) say nothing gRPC uses;
		// grpc-go's "application/grpc;json" form is a subtype, not one.
		if !strings.HasPrefix(ct, "application/grpc;") {
			ct = strings.TrimSpace(ct[:i])
		}
	}
	const app = "application/"
	if !strings.HasPrefix(ct, app) {
		return None, ""
	}
	rest := ct[len(app):]
	for _, p := range [...]struct {
		prefix string
		proto  Protocol
	}{
		{"grpc-web-text", GRPCWebText},
		{"grpc-web", GRPCWeb},
		{"grpc", GRPC},
		{"connect", ConnectStream},
	} {
		if !strings.HasPrefix(rest, p.prefix) {
			continue
		}
		sub := rest[len(p.prefix):]
		switch {
		case sub == "":
			if p.proto == ConnectStream {
				return None, "" // application/connect names no codec
			}
			return p.proto, ""
		case sub[0] == '+' || (sub[0] == ';' && p.proto == GRPC):
			return p.proto, sub[1:]
		}
		if p.proto == GRPC || p.proto == GRPCWeb || p.proto == GRPCWebText {
			continue // application/grpcfoo: not gRPC; maybe a Connect codec
		}
		return None, ""
	}
	if rest == "" || strings.ContainsAny(rest, "+/ ") {
		return None, ""
	}
	return ConnectUnary, rest
}

// hasParam reports whether a raw query has the parameter name.
func hasParam(query, name string) bool {
	for query != "" {
		var kv string
		kv, query, _ = strings.Cut(query, "&")
		k, _, _ := strings.Cut(kv, "=")
		if k == name {
			return true
		}
	}
	return false
}
