package leangrpc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/hpack"
	"github.com/leangrpc/leangrpc/internal/webwire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The web protocols: gRPC-Web and the Connect protocol served to the same
// services as gRPC, on the server's own listener and through ServeHTTP
// (internal/webwire translates; this file routes).

// ServeHTTP serves one HTTP request, so that a Server mounts in any
// net/http server or mux, as grpc-go's Server.ServeHTTP does: gRPC (which
// needs HTTP/2: an http.Server with TLS, or with Protocols allowing
// unencrypted HTTP/2), gRPC-Web and the Connect protocol, over HTTP/1.1
// too. net/http owns the connection: the call's peer is the request's
// remote address, its AuthInfo a credentials.TLSInfo of the request's TLS
// state, and limits on connections, header sizes and abuse are
// net/http's. Requests that are no call of a registered service go to the
// HTTPHandler option's handler when there is one.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.markServing()
	origin := r.Header.Get("Origin")
	if r.Method == http.MethodOptions && s.cors != nil {
		if s.cors.Allowed(origin) && r.Header.Get("Access-Control-Request-Method") != "" {
			h := w.Header()
			for _, f := range s.cors.Preflight(origin, r.Header.Get("Access-Control-Request-Headers")) {
				h.Set(f.Name, f.Value)
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	proto, codec := webwire.Classify(r.Method, r.Header.Get("Content-Type"), r.URL.RequestURI())
	if proto.Web() && !s.opts.webProtocols {
		proto = webwire.None
	}
	if proto == webwire.None || (s.opts.httpHandler != nil && !s.knownMethod(r.URL.Path)) {
		if s.opts.httpHandler != nil {
			s.opts.httpHandler.ServeHTTP(w, r)
			return
		}
		if allow, bad := s.badVerb(r.Method, r.URL.Path); bad {
			w.Header().Set("Allow", allow)
			http.Error(w, "leangrpc: method "+r.Method+" not allowed", http.StatusMethodNotAllowed)
			return
		}
		http.Error(w, "leangrpc: not a gRPC, gRPC-Web or Connect request", http.StatusUnsupportedMediaType)
		return
	}
	if proto == webwire.GRPC && r.ProtoMajor != 2 {
		http.Error(w, "gRPC requires HTTP/2", http.StatusBadRequest)
		return
	}
	if s.cors != nil && s.cors.Allowed(origin) {
		h := w.Header()
		for _, f := range s.cors.ResponseFields(origin) {
			h.Set(f.Name, f.Value)
		}
	}
	pool := s.wireCfg.Pool
	c := webwire.NewHTTPCarrier(w, r, pool)
	fields := requestFields(r)
	wr, werr := webwire.Translate(proto, codec, fields, make([]hpack.HeaderField, 0, len(fields)+4))
	if werr != nil {
		webwire.Refuse(c, pool, proto, codec, werr)
		return
	}
	p := &peer.Peer{Addr: addrOf(r.RemoteAddr), LocalAddr: localAddrOf(r)}
	if r.TLS != nil {
		p.AuthInfo = credentials.TLSInfo{State: *r.TLS, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	}
	if auth, ok := r.Context().Value(handedAuthKey{}).(credentials.AuthInfo); ok {
		p.AuthInfo = auth // a connection of the server's own listener (http1.go)
	}
	base := r.Context()
	if _, ok := base.Deadline(); !ok {
		// This goroutine watches the request's end while the call runs
		// (HTTPCarrier.Wait): the call's context need not register with
		// the request's, which costs about 3 µs a call (context.AfterFunc).
		base = context.WithoutCancel(base)
	}
	parent := peer.NewContext(base, p)
	call := s.serveWeb(parent, c, wr, nil)
	if c.Wait(call) {
		// Ended abnormally: net/http resets the stream or closes the
		// connection rather than end the response as if it were whole.
		panic(http.ErrAbortHandler)
	}
}

// markServing marks the server serving, so that a RegisterService after
// the first request panics, as after Serve.
func (s *Server) markServing() {
	if s.httpServing.Load() {
		return
	}
	s.mu.Lock()
	s.serving = true
	s.mu.Unlock()
	s.httpServing.Store(true)
}

// requestFields are r's header fields as HTTP/2 carries them.
func requestFields(r *http.Request) []hpack.HeaderField {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	n := 4
	for _, vv := range r.Header {
		n += len(vv)
	}
	f := make([]hpack.HeaderField, 0, n)
	f = append(f,
		hpack.HeaderField{Name: ":method", Value: r.Method},
		hpack.HeaderField{Name: ":path", Value: r.URL.RequestURI()},
		hpack.HeaderField{Name: ":authority", Value: r.Host},
		hpack.HeaderField{Name: ":scheme", Value: scheme},
	)
	for k, vv := range r.Header {
		name := lowerKey(k)
		for _, v := range vv {
			f = append(f, hpack.HeaderField{Name: name, Value: v})
		}
	}
	return f
}

// lowerKey is a canonical header name in lower case, as HTTP/2 carries
// it, without an allocation for the names calls usually carry.
func lowerKey(k string) string {
	switch k {
	case "Content-Type":
		return "content-type"
	case "Te":
		return "te"
	case "User-Agent":
		return "user-agent"
	case "Grpc-Timeout":
		return "grpc-timeout"
	case "Grpc-Encoding":
		return "grpc-encoding"
	case "Grpc-Accept-Encoding":
		return "grpc-accept-encoding"
	case "Accept-Encoding":
		return "accept-encoding"
	case "Content-Length":
		return "content-length"
	case "Connect-Protocol-Version":
		return "connect-protocol-version"
	case "Connect-Timeout-Ms":
		return "connect-timeout-ms"
	case "Origin":
		return "origin"
	case "X-Grpc-Web":
		return "x-grpc-web"
	case "X-User-Agent":
		return "x-user-agent"
	}
	return strings.ToLower(k)
}

// addrOf is a request's remote address as a net.Addr.
func addrOf(hostport string) net.Addr {
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return strAddr(hostport)
}

func localAddrOf(r *http.Request) net.Addr {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return a
}

// strAddr is an address net cannot parse, as net/http gave it.
type strAddr string

func (a strAddr) Network() string { return "tcp" }
func (a strAddr) String() string  { return string(a) }

// knownMethod reports whether path names a method of a registered service
// (or any method, with an UnknownServiceHandler).
func (s *Server) knownMethod(path string) bool {
	if s.opts.unknownHandler != nil {
		return true
	}
	service, name, ok := grpcwire.SplitMethod(path)
	if !ok {
		return false
	}
	info := s.services[service]
	if info == nil {
		return false
	}
	_, unary := info.methods[name]
	_, stream := info.streams[name]
	return unary || stream
}

// unknownMethodMsg is the message of the Unimplemented status of a call
// to a method no service has: the handler dispatch's (rpc.handle's).
func (s *Server) unknownMethodMsg(method string) string {
	service, name, ok := grpcwire.SplitMethod(method)
	switch {
	case !ok:
		return fmt.Sprintf("malformed method name: %q", method)
	case s.services[service] != nil:
		return fmt.Sprintf("unknown method %v for service %v", name, service)
	}
	return fmt.Sprintf("unknown service %v", service)
}

// badVerb reports whether a request that is no call of any protocol is
// one to a method's path with an HTTP method other than POST and GET,
// and returns the Allow field's value: the Connect protocol's servers
// answer 405 Method Not Allowed there (and grpc-go a gRPC request that
// is no POST), where other requests that are no call get 415.
func (s *Server) badVerb(method, path string) (allow string, bad bool) {
	if !s.opts.webProtocols || method == http.MethodPost || method == http.MethodGet {
		return "", false
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if !s.knownMethod(path) {
		return "", false
	}
	if s.sideEffectFree(path) {
		return "GET, POST", true
	}
	return "POST", true
}

// serveWeb runs a web request (or gRPC under net/http) as a call, on a
// handler worker as native calls run. st is the engine stream it came on,
// nil under ServeHTTP. It returns the call's stream, to be told when the
// exchange ends abnormally; nil when the request was answered without a
// call.
func (s *Server) serveWeb(parent context.Context, c webwire.Carrier, wr *webwire.Request, st *h2conn.Stream) h2conn.ResetHandler {
	pool := s.wireCfg.Pool
	tr := webwire.NewTransport(c, wr, pool, s.wireCfg.MaxRecv)
	// answer runs an answer given before any handler: on an engine
	// stream not on the connection's reader, which a send may wait for.
	answer := func(f func()) {
		if st == nil {
			f()
			return
		}
		go f()
	}
	r := &rpc{srv: s}
	req, rej := grpcwire.ParseRequestScratch(wr.Fields, r.scratch[:])
	if rej != nil {
		answer(func() { tr.Reject(rej) })
		return nil
	}
	if s.wireCfg.Codec == nil && wr.Proto.Web() && wr.Codec != "json" {
		if _, ok := grpcwire.CodecFor(wr.Codec); !ok {
			// The Connect protocol and gRPC-Web name codecs in the
			// content-type: one the server lacks is HTTP 415. ("json"
			// without a registered codec is grpcwire.JSONCodec.)
			answer(func() {
				webwire.Plain(c, pool, http.StatusUnsupportedMediaType, "leangrpc: unsupported codec "+wr.Codec)
				tr.Release()
			})
			return nil
		}
	}
	if s.opts.inTap != nil {
		var rej *grpcwire.Reject
		if parent, rej = s.tap(parent, &req); rej != nil {
			answer(func() { tr.Reject(rej) })
			return nil
		}
	}
	if (wr.Proto == webwire.ConnectUnary || wr.Proto == webwire.ConnectStream) && !s.knownMethod(req.Method) {
		// The Connect protocol routes by path: no procedure there is
		// HTTP 404 (Unimplemented), as its servers answer (a mux's), not
		// the 501 its error table gives a handler's Unimplemented.
		answer(func() {
			webwire.Refuse(c, pool, wr.Proto, wr.Codec, &webwire.Error{HTTPStatus: http.StatusNotFound,
				Code: codes.Unimplemented, Msg: s.unknownMethodMsg(req.Method)})
		})
		return nil
	}
	r.info, r.unary = s.unaryMethod(req.Method)
	if wr.GET && !s.sideEffectFree(req.Method) {
		answer(func() {
			webwire.Refuse(c, pool, wr.Proto, wr.Codec, &webwire.Error{HTTPStatus: http.StatusMethodNotAllowed,
				Code: codes.InvalidArgument, Msg: "GET is only for methods declared idempotency_level = NO_SIDE_EFFECTS"})
		})
		return nil
	}
	r.ss.InitTransport(parent, tr, req, &s.wireCfg)
	if ctxKeysLearned {
		r.ss.SetContext(r)
	}
	s.handlers.Add(1)
	if st != nil {
		st.SetResetHandler(&r.ss)
	}
	// Under ServeHTTP too the call runs on a handler worker, whose stack
	// has grown to what calls need, while net/http's goroutine waits
	// (HTTPCarrier.Wait): a new goroutine per request would grow its
	// stack by copying, frame by frame, for every call (11% of the CPU of
	// a unary call under ServeHTTP, measured).
	s.workers.run(r)
	return &r.ss
}

// sideEffectFree reports whether a method is declared idempotency_level =
// NO_SIDE_EFFECTS in its protobuf descriptor (which the Connect protocol
// asks of a method called with GET), found through the protobuf registry.
func (s *Server) sideEffectFree(method string) bool {
	if v, ok := s.getMethods.Load(method); ok {
		return v.(bool)
	}
	ok := false
	if service, name, split := grpcwire.SplitMethod(method); split {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service + "." + name))
		if err == nil {
			if md, isMethod := d.(protoreflect.MethodDescriptor); isMethod {
				opts, _ := md.Options().(*descriptorpb.MethodOptions)
				ok = opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
			}
		}
	}
	s.getMethods.Store(method, ok)
	return ok
}

// serveWebStream serves, on the engine, a request that grpcwire refused
// as no gRPC call: a web protocol's call, a CORS preflight, or a request
// for the HTTPHandler option's handler. It reports whether it took the
// stream; it runs on the connection's reader, which it must not block.
func (sc *serverConn) serveWebStream(st *h2conn.Stream) bool {
	s := sc.srv
	var method, ctype, origin, path, preflightMethod, reqHeaders string
	for _, f := range st.Headers() {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		case "content-type":
			ctype = f.Value
		case "origin":
			origin = f.Value
		case "access-control-request-method":
			preflightMethod = f.Value
		case "access-control-request-headers":
			reqHeaders = f.Value
		}
	}
	proto, codec := webwire.Classify(method, ctype, path)
	if !s.opts.webProtocols {
		proto = webwire.None
	}
	if method == http.MethodOptions && preflightMethod != "" && s.cors != nil && s.cors.Allowed(origin) {
		// A CORS preflight is answered before the HTTPHandler option's
		// handler is asked, as ServeHTTP answers it: it has no
		// content-type, so Classify finds no call in it, and the
		// handler (a file server's 404, say) would make browsers refuse
		// every cross-origin call.
		c := &webwire.H2Carrier{St: st}
		go func() {
			c.Send(http.StatusNoContent, s.cors.Preflight(origin, reqHeaders), nil, nil, true, false)
			c.Release()
		}()
		return true
	}
	if s.opts.httpHandler != nil {
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		if proto == webwire.None || !s.knownMethod(path) {
			go s.serveHTTPOnStream(sc, st)
			return true
		}
	}
	c := &webwire.H2Carrier{St: st}
	if s.cors != nil && s.cors.Allowed(origin) {
		c.Extra = s.cors.ResponseFields(origin)
	}
	if proto == webwire.None {
		if allow, bad := s.badVerb(method, path); bad {
			go func() {
				webwire.MethodNotAllowed(c, s.wireCfg.Pool, method, allow)
				c.Release()
			}()
			return true
		}
	}
	if !proto.Web() {
		return false
	}
	wr, werr := webwire.Translate(proto, codec, st.Headers(), nil)
	if werr != nil {
		go webwire.Refuse(c, s.wireCfg.Pool, proto, codec, werr)
		return true
	}
	s.serveWeb(sc.context(), c, wr, st)
	return true
}

// ProtocolFromContext returns the protocol of the call whose handler
// context ctx is (or derives from): "grpc", "grpc-web" or "connect". A
// handler does not need it: every protocol gets the same metadata,
// status, deadline and peer; it is for logs and metrics.
func ProtocolFromContext(ctx context.Context) string {
	if p, ok := ctx.Value(protocolKey{}).(webwire.Protocol); ok {
		return p.String()
	}
	return "grpc"
}

// protocolKey is the context key ProtocolFromContext asks (rpc.Value).
type protocolKey struct{}

// handedAuthKey is the context key of the AuthInfo of a connection the
// server's own listener handed to net/http (http1.go).
type handedAuthKey struct{}

// serveHTTPOnStream runs the HTTPHandler option's handler on an engine
// stream (a request of the own listener's HTTP/2 that is no call).
func (s *Server) serveHTTPOnStream(sc *serverConn, st *h2conn.Stream) {
	var extra []hpack.HeaderField
	for _, f := range st.Headers() {
		if f.Name == "origin" && s.cors != nil && s.cors.Allowed(f.Value) {
			extra = s.cors.ResponseFields(f.Value)
		}
	}
	ctx := context.WithValue(sc.context(), http.LocalAddrContextKey, sc.peer.LocalAddr)
	webwire.ServeHandler(ctx, s.opts.httpHandler, st, s.wireCfg.Pool, sc.peer.Addr.String(), extra)
}
