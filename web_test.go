package leangrpc_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/leangrpc/leangrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// webService is the TestService the web protocol tests call: UnaryCall
// echoes the payload's size and metadata, fails with details when asked
// (ResponseStatus), and reports the protocol it was called with;
// StreamingOutputCall sends one response per parameter;
// FullDuplexCall echoes.
type webService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (webService) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	grpc.SetHeader(ctx, metadata.Pairs("x-echo", strings.Join(md.Get("x-in"), ","), "x-protocol", leangrpc.ProtocolFromContext(ctx)))
	grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t1"))
	if s := in.GetResponseStatus(); s != nil {
		st, _ := status.New(codes.Code(s.GetCode()), s.GetMessage()).WithDetails(&errdetails.ErrorInfo{Reason: "because", Domain: "leangrpc.test"})
		return nil, st.Err()
	}
	if _, ok := peer.FromContext(ctx); !ok {
		return nil, status.Error(codes.Internal, "no peer")
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: make([]byte, in.GetResponseSize())}, Username: "user"}, nil
}

func (webService) StreamingOutputCall(in *testpb.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	stream.SetHeader(metadata.Pairs("x-stream", "h"))
	for _, p := range in.GetResponseParameters() {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	stream.SetTrailer(metadata.Pairs("x-stream-trailer", "t"))
	if s := in.GetResponseStatus(); s != nil {
		return status.Error(codes.Code(s.GetCode()), s.GetMessage())
	}
	return nil
}

func (webService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		in, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for _, p := range in.GetResponseParameters() {
			if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
				return err
			}
		}
	}
}

// webServer is a leangrpc server with webService, served on its own
// listener (own) and through ServeHTTP in a net/http server that speaks
// HTTP/1.1 and HTTP/2 with prior knowledge (mounted).
type webServer struct {
	srv     *leangrpc.Server
	own     string // host:port of Serve
	mounted string // host:port of the net/http server
}

func startWeb(t *testing.T, opts ...leangrpc.ServerOption) *webServer {
	t.Helper()
	srv := leangrpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(srv, webService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go hs.Serve(hl)
	t.Cleanup(func() {
		hs.Close()
		srv.Stop()
	})
	return &webServer{srv: srv, own: lis.Addr().String(), mounted: hl.Addr().String()}
}

// httpClient returns a client speaking HTTP/1.1, or HTTP/2 with prior
// knowledge when h2.
func httpClient(h2 bool) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if h2 {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestServeHTTPGRPC runs grpc-go's client against ServeHTTP mounted in
// net/http: unary, streaming both ways, metadata, a status with details.
func TestServeHTTPGRPC(t *testing.T) {
	ws := startWeb(t)
	cc, err := grpc.NewClient(ws.mounted, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	tc := testgrpc.NewTestServiceClient(cc)
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-in", "v")
	var hdr, trl metadata.MD
	resp, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 10}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetPayload().GetBody()) != 10 || hdr.Get("x-echo")[0] != "v" || hdr.Get("x-protocol")[0] != "grpc" || trl.Get("x-trailer")[0] != "t1" {
		t.Fatalf("got %v, headers %v, trailers %v", resp, hdr, trl)
	}
	_, err = tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: "gone"}})
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "gone" || len(st.Details()) != 1 {
		t.Fatalf("error: %v (details %v)", err, st.Details())
	}
	bidi, err := tc.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if err := bidi.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: int32(i)}}}); err != nil {
			t.Fatal(err)
		}
		got, err := bidi.Recv()
		if err != nil || len(got.GetPayload().GetBody()) != i {
			t.Fatalf("bidi %d: %v %v", i, got, err)
		}
	}
	bidi.CloseSend()
	if _, err := bidi.Recv(); err != io.EOF {
		t.Fatalf("bidi end: %v", err)
	}
}

// connectClients are connect-go's clients of UnaryCall for each protocol
// and codec, over HTTP/1.1 and HTTP/2, on both ways of serving.
func TestWebProtocolsUnary(t *testing.T) {
	ws := startWeb(t)
	for _, where := range []struct {
		name, addr string
		h1         bool // the own listener speaks HTTP/1.1 only through the hand-off
	}{{"mounted", ws.mounted, true}, {"own", ws.own, true}} {
		for _, h2 := range []bool{false, true} {
			if !h2 && !where.h1 {
				continue
			}
			for _, proto := range []string{"connect", "grpc-web"} {
				for _, codec := range []string{"proto", "json"} {
					for _, gz := range []bool{false, true} {
						name := where.name + "/" + map[bool]string{false: "h1", true: "h2"}[h2] + "/" + proto + "/" + codec + map[bool]string{false: "", true: "/gzip"}[gz]
						t.Run(name, func(t *testing.T) {
							opts := []connect.ClientOption{}
							if proto == "grpc-web" {
								opts = append(opts, connect.WithGRPCWeb())
							}
							if codec == "json" {
								opts = append(opts, connect.WithProtoJSON())
							}
							if gz {
								opts = append(opts, connect.WithSendGzip())
							}
							client := connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](httpClient(h2),
								"http://"+where.addr+"/grpc.testing.TestService/UnaryCall", opts...)
							req := connect.NewRequest(&testpb.SimpleRequest{ResponseSize: 2000, Payload: &testpb.Payload{Body: bytes.Repeat([]byte{'a'}, 3000)}})
							req.Header().Set("x-in", "v")
							resp, err := client.CallUnary(ctxT(t), req)
							if err != nil {
								t.Fatal(err)
							}
							if len(resp.Msg.GetPayload().GetBody()) != 2000 || resp.Msg.GetUsername() != "user" {
								t.Fatalf("response %v", resp.Msg)
							}
							want := map[string]string{"connect": "connect", "grpc-web": "grpc-web"}[proto]
							if resp.Header().Get("x-echo") != "v" || resp.Header().Get("x-protocol") != want || resp.Trailer().Get("x-trailer") != "t1" {
								t.Fatalf("headers %v trailers %v", resp.Header(), resp.Trailer())
							}
							req = connect.NewRequest(&testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: "gone"}})
							_, err = client.CallUnary(ctxT(t), req)
							var ce *connect.Error
							if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound || ce.Message() != "gone" || len(ce.Details()) != 1 {
								t.Fatalf("error %v", err)
							}
							if ce.Meta().Get("x-trailer") != "t1" {
								t.Fatalf("error metadata %v", ce.Meta())
							}
							d, err := ce.Details()[0].Value()
							if info, ok := d.(*errdetails.ErrorInfo); err != nil || !ok || info.GetReason() != "because" {
								t.Fatalf("detail %v %v", d, err)
							}
						})
					}
				}
			}
		}
	}
}

// TestWebProtocolsStreaming runs server streaming over Connect and
// gRPC-Web on HTTP/1.1 and HTTP/2, and bidi streaming over HTTP/2.
func TestWebProtocolsStreaming(t *testing.T) {
	ws := startWeb(t)
	for _, where := range []struct{ name, addr string }{{"mounted", ws.mounted}, {"own", ws.own}} {
		for _, h2 := range []bool{false, true} {
			for _, proto := range []string{"connect", "grpc-web"} {
				t.Run(where.name+"/"+map[bool]string{false: "h1", true: "h2"}[h2]+"/"+proto, func(t *testing.T) {
					opts := []connect.ClientOption{}
					if proto == "grpc-web" {
						opts = append(opts, connect.WithGRPCWeb())
					}
					client := connect.NewClient[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse](httpClient(h2),
						"http://"+where.addr+"/grpc.testing.TestService/StreamingOutputCall", opts...)
					in := &testpb.StreamingOutputCallRequest{}
					for i := 1; i <= 5; i++ {
						in.ResponseParameters = append(in.ResponseParameters, &testpb.ResponseParameters{Size: int32(i * 1000)})
					}
					in.ResponseStatus = &testpb.EchoStatus{Code: int32(codes.Aborted), Message: "stop"}
					stream, err := client.CallServerStream(ctxT(t), connect.NewRequest(in))
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					for stream.Receive() {
						n++
						if len(stream.Msg().GetPayload().GetBody()) != n*1000 {
							t.Fatalf("message %d: %d bytes", n, len(stream.Msg().GetPayload().GetBody()))
						}
					}
					if n != 5 || connect.CodeOf(stream.Err()) != connect.CodeAborted {
						t.Fatalf("%d messages, end %v", n, stream.Err())
					}
					if stream.ResponseHeader().Get("x-stream") != "h" || stream.ResponseTrailer().Get("x-stream-trailer") != "t" {
						t.Fatalf("headers %v trailers %v", stream.ResponseHeader(), stream.ResponseTrailer())
					}
					stream.Close()
					if !h2 {
						return
					}
					bclient := connect.NewClient[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse](httpClient(true),
						"http://"+where.addr+"/grpc.testing.TestService/FullDuplexCall", opts...)
					bidi := bclient.CallBidiStream(ctxT(t))
					for i := 1; i <= 3; i++ {
						if err := bidi.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: int32(i)}}}); err != nil {
							t.Fatal(err)
						}
						got, err := bidi.Receive()
						if err != nil || len(got.GetPayload().GetBody()) != i {
							t.Fatalf("bidi %d: %v %v", i, got, err)
						}
					}
					bidi.CloseRequest()
					if _, err := bidi.Receive(); !errors.Is(err, io.EOF) {
						t.Fatalf("bidi end: %v", err)
					}
					bidi.CloseResponse()
				})
			}
		}
	}
}

// webPost sends a raw request and returns the response and its body.
func webPost(t *testing.T, c *http.Client, method, url, ctype string, body []byte, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// envelope frames msg as gRPC, gRPC-Web and Connect streaming do.
func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// TestGRPCWebText sends a grpc-web-text request over HTTP/1.1 and reads
// the base64 response: messages and the trailer frame.
func TestGRPCWebText(t *testing.T) {
	ws := startWeb(t)
	for _, addr := range []string{ws.mounted, ws.own} {
		in, _ := proto.Marshal(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 3}, {Size: 4}}})
		body := []byte(base64.StdEncoding.EncodeToString(envelope(0, in)))
		resp, out := webPost(t, httpClient(false), "POST", "http://"+addr+"/grpc.testing.TestService/StreamingOutputCall", "application/grpc-web-text", body, "X-Grpc-Web", "1")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/grpc-web-text") {
			t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		// Each frame is base64 with its own padding: decode by quanta.
		var dec []byte
		for i := 0; i+4 <= len(out); i += 4 {
			q, err := base64.StdEncoding.DecodeString(string(out[i : i+4]))
			if err != nil {
				t.Fatalf("base64: %v", err)
			}
			dec = append(dec, q...)
		}
		var sizes []int
		var trailer string
		for len(dec) >= 5 {
			n := int(binary.BigEndian.Uint32(dec[1:5]))
			if dec[0]&0x80 != 0 {
				trailer = string(dec[5 : 5+n])
			} else {
				var m testpb.StreamingOutputCallResponse
				if err := proto.Unmarshal(dec[5:5+n], &m); err != nil {
					t.Fatal(err)
				}
				sizes = append(sizes, len(m.GetPayload().GetBody()))
			}
			dec = dec[5+n:]
		}
		if len(sizes) != 2 || sizes[0] != 3 || sizes[1] != 4 || !strings.Contains(trailer, "grpc-status: 0\r\n") || !strings.Contains(trailer, "x-stream-trailer: t\r\n") {
			t.Fatalf("sizes %v, trailer %q", sizes, trailer)
		}
	}
}

// TestWebDeadlineHTTP1 checks that a call whose deadline passes over
// HTTP/1.1, which has no stream to reset, is answered with
// DEADLINE_EXCEEDED rather than a closed connection, and that the
// handler's receive, waiting for a request the client never ends, returns
// (the conformance suite's Timeouts cases).
func TestWebDeadlineHTTP1(t *testing.T) {
	ws := startWeb(t)
	for _, addr := range []string{ws.mounted, ws.own} {
		// One request message, and a request that does not end (until
		// 5s: net/http's client waits for the request's writing, even
		// when the server closed the connection).
		pr, pw := io.Pipe()
		time.AfterFunc(5*time.Second, func() { pw.Close() })
		go pw.Write(envelope(0, nil))
		req, err := http.NewRequestWithContext(ctxT(t), "POST", "http://"+addr+"/grpc.testing.TestService/FullDuplexCall", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/connect+proto")
		req.Header.Set("Connect-Timeout-Ms", "100")
		resp, err := httpClient(false).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		pw.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "deadline_exceeded") {
			t.Errorf("%s: %d %q %v", addr, resp.StatusCode, body, err)
		}
	}
}

// TestConnectBadRequests checks the protocol's errors for input it
// refuses.
func TestConnectBadRequests(t *testing.T) {
	ws := startWeb(t)
	for _, tc := range []struct {
		addr string
		h2   bool
	}{{ws.mounted, false}, {ws.own, false}, {ws.own, true}} {
		name := map[bool]string{false: "mounted", true: "own"}[tc.addr == ws.own] + map[bool]string{false: "/h1", true: "/h2"}[tc.h2]
		t.Run(name, func(t *testing.T) {
			connectBadRequests(t, httpClient(tc.h2), "http://"+tc.addr+"/grpc.testing.TestService/")
		})
	}
}

func connectBadRequests(t *testing.T, c *http.Client, base string) {
	resp, _ := webPost(t, c, "POST", base+"UnaryCall", "application/xml", []byte("<x/>"))
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("unknown codec: %d", resp.StatusCode)
	}
	resp, _ = webPost(t, c, "POST", base+"UnaryCall", "text/plain", []byte("x"))
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d", resp.StatusCode)
	}
	resp, body := webPost(t, c, "GET", base+"UnaryCall?encoding=json&message={}", "", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(body), `"code"`) {
		t.Errorf("GET with side effects: %d %s", resp.StatusCode, body)
	}
	resp, body = webPost(t, c, "POST", base+"UnaryCall", "application/json", []byte("{"))
	if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("malformed JSON: %d %s", resp.StatusCode, body)
	}
	resp, body = webPost(t, c, "POST", base+"UnaryCall", "application/json", []byte("{}"), "Connect-Timeout-Ms", "abc")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "invalid_argument") {
		t.Errorf("bad timeout: %d %s", resp.StatusCode, body)
	}
	// Another HTTP method at a method's path: 405 with Allow (the
	// conformance suite's unexpected-verb case).
	resp, _ = webPost(t, c, "DELETE", base+"UnaryCall", "application/proto", nil, "Connect-Protocol-Version", "1")
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("DELETE: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	// No procedure at the path: 404, as the Connect protocol's servers
	// route (the conformance suite's unexpected-uri case).
	resp, body = webPost(t, c, "POST", base+"NoSuchMethod", "application/json", []byte("{}"))
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "unimplemented") {
		t.Errorf("unknown method: %d %s", resp.StatusCode, body)
	}
	resp, body = webPost(t, c, "POST", base+"UnaryCall", "application/json", []byte(`{"responseSize": 10}`), "Connect-Protocol-Version", "1")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Trailer-X-Trailer") != "t1" {
		t.Errorf("JSON unary: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// TestWebCORS checks preflights and the fields of an allowed origin's
// response, and that other origins get neither.
func TestWebCORS(t *testing.T) {
	ws := startWeb(t, leangrpc.CORSOrigins("https://app.example"))
	for _, tc := range []struct {
		addr string
		h2   bool
	}{{ws.mounted, false}, {ws.own, false}, {ws.own, true}} {
		addr, c := tc.addr, httpClient(tc.h2)
		url := "http://" + addr + "/grpc.testing.TestService/UnaryCall"
		resp, _ := webPost(t, c, "OPTIONS", url, "", nil, "Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type,x-in")
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || resp.Header.Get("Access-Control-Allow-Headers") != "content-type,x-in" {
			t.Errorf("%s preflight: %d %v", addr, resp.StatusCode, resp.Header)
		}
		resp, _ = webPost(t, c, "POST", url, "application/json", []byte("{}"), "Origin", "https://app.example")
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "grpc-status") {
			t.Errorf("%s allowed: %d %v", addr, resp.StatusCode, resp.Header)
		}
		resp, _ = webPost(t, c, "POST", url, "application/json", []byte("{}"), "Origin", "https://evil.example")
		if resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s other origin allowed: %v", addr, resp.Header)
		}
	}
}

// TestHTTPHandlerRoutes checks that requests that are no call reach the
// HTTPHandler, on both ways of serving.
func TestHTTPHandlerRoutes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.Proto) })
	ws := startWeb(t, leangrpc.HTTPHandler(mux))
	for _, tc := range []struct {
		addr string
		h2   bool
		want string
	}{{ws.mounted, false, "ok HTTP/1.1"}, {ws.mounted, true, "ok HTTP/2.0"}, {ws.own, false, "ok HTTP/1.1"}, {ws.own, true, "ok HTTP/2.0"}} {
		resp, body := webPost(t, httpClient(tc.h2), "GET", "http://"+tc.addr+"/healthz", "", nil)
		if resp.StatusCode != 200 || string(body) != tc.want {
			t.Errorf("%s h2=%v: %d %q", tc.addr, tc.h2, resp.StatusCode, body)
		}
		resp, _ = webPost(t, httpClient(tc.h2), "GET", "http://"+tc.addr+"/nothing", "", nil)
		if resp.StatusCode != 404 {
			t.Errorf("%s h2=%v /nothing: %d", tc.addr, tc.h2, resp.StatusCode)
		}
	}
}

// TestHTTP1OverTLS serves HTTP/1.1 on the own listener over TLS: grpc-go's
// TLS credentials with "http/1.1" among the configuration's NextProtos
// let ALPN choose it, and the call sees the TLS AuthInfo.
func TestHTTP1OverTLS(t *testing.T) {
	cfg := &tls.Config{Certificates: []tls.Certificate{tlsKeyPair(t, "x509/server1_cert.pem", "x509/server1_key.pem")}, NextProtos: []string{"h2", "http/1.1"}}
	srv := leangrpc.NewServer(leangrpc.Creds(credentials.NewTLS(cfg)), leangrpc.UnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p, _ := peer.FromContext(ctx)
			if _, ok := p.AuthInfo.(credentials.TLSInfo); !ok {
				return nil, status.Errorf(codes.Unauthenticated, "AuthInfo %T", p.AuthInfo)
			}
			return h(ctx, req)
		}))
	testgrpc.RegisterTestServiceServer(srv, webService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tlsCAPool(t, "x509/server_ca_cert.pem"), ServerName: "x.test.example.com"}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		client := connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](&http.Client{Transport: tr, Timeout: 10 * time.Second},
			"https://"+lis.Addr().String()+"/grpc.testing.TestService/UnaryCall")
		resp, err := client.CallUnary(ctxT(t), connect.NewRequest(&testpb.SimpleRequest{ResponseSize: 5}))
		if err != nil {
			t.Fatalf("h2=%v: %v", h2, err)
		}
		if len(resp.Msg.GetPayload().GetBody()) != 5 {
			t.Fatalf("h2=%v: %v", h2, resp.Msg)
		}
		tr.CloseIdleConnections()
	}
}

// TestWebCORSPreflightWithHTTPHandler checks that preflights are answered
// with an HTTPHandler too, on every way of serving: on the own listener's
// HTTP/2 (what browsers speak over TLS) they went to the handler, and
// browsers refused every cross-origin call.
func TestWebCORSPreflightWithHTTPHandler(t *testing.T) {
	ws := startWeb(t, leangrpc.CORSOrigins("https://app.example"), leangrpc.HTTPHandler(http.NotFoundHandler()))
	for _, tc := range []struct {
		addr string
		h2   bool
	}{{ws.mounted, false}, {ws.mounted, true}, {ws.own, false}, {ws.own, true}} {
		url := "http://" + tc.addr + "/grpc.testing.TestService/UnaryCall"
		resp, _ := webPost(t, httpClient(tc.h2), "OPTIONS", url, "", nil, "Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type,x-in")
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || resp.Header.Get("Access-Control-Allow-Headers") != "content-type,x-in" {
			t.Errorf("%s h2=%v preflight: %d %v", tc.addr, tc.h2, resp.StatusCode, resp.Header)
		}
	}
}

// TestServeHTTPClientGoneEndsContext: under ServeHTTP, a client that
// cancels its call ends the handler's context, over HTTP/2 and HTTP/1.1
// (where net/http notices a closed connection once the request's body
// was read).
func TestServeHTTPClientGoneEndsContext(t *testing.T) {
	ended := make(chan error, 4)
	started := make(chan struct{}, 4)
	srv := leangrpc.NewServer()
	srv.RegisterService(streamService(func(_ any, ss grpc.ServerStream) error {
		var m testpb.Empty
		for ss.RecvMsg(&m) == nil {
		}
		started <- struct{}{}
		<-ss.Context().Done()
		ended <- ss.Context().Err()
		return ss.Context().Err()
	}), nil)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go hs.Serve(hl)
	defer hs.Close()
	for _, h2 := range []bool{true, false} {
		ctx, cancel := context.WithCancel(ctxT(t))
		// A Connect streaming request: the handler waits on its context.
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+hl.Addr().String()+streamMethod, bytes.NewReader(envelope(0, nil)))
		req.Header.Set("Content-Type", "application/connect+proto")
		go httpClient(h2).Do(req)
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatalf("h2=%v: handler did not start", h2)
		}
		cancel()
		select {
		case err := <-ended:
			if err != context.Canceled {
				t.Fatalf("h2=%v: context ended with %v", h2, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("h2=%v: the handler's context did not end when the client went away", h2)
		}
	}
}

// webStatsRecorder records the kinds of server-side stats events.
type webStatsRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *webStatsRecorder) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}
func (r *webStatsRecorder) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (r *webStatsRecorder) HandleConn(context.Context, stats.ConnStats) {}
func (r *webStatsRecorder) HandleRPC(_ context.Context, s stats.RPCStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch s := s.(type) {
	case *stats.Begin:
		r.events = append(r.events, "begin")
	case *stats.InPayload:
		r.events = append(r.events, "in")
	case *stats.OutPayload:
		r.events = append(r.events, "out")
	case *stats.End:
		if s.Error != nil {
			r.events = append(r.events, "end:"+status.Code(s.Error).String())
		} else {
			r.events = append(r.events, "end")
		}
	}
}

// TestWebStatsHandler: a stats handler sees a web call as it sees a gRPC
// one: its start, its messages and its end, with the status.
func TestWebStatsHandler(t *testing.T) {
	rec := &webStatsRecorder{}
	ws := startWeb(t, leangrpc.StatsHandler(rec))
	for _, addr := range []string{ws.own, ws.mounted} {
		rec.mu.Lock()
		rec.events = nil
		rec.mu.Unlock()
		client := connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](httpClient(true),
			"http://"+addr+"/grpc.testing.TestService/UnaryCall")
		// The server reports a call's end after its answer went out, so
		// each call's events are awaited before the next call starts.
		wantEvents := func(want string) {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for {
				rec.mu.Lock()
				got := strings.Join(rec.events, " ")
				rec.mu.Unlock()
				if got == want {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: events %q, want %q", addr, got, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if _, err := client.CallUnary(ctxT(t), connect.NewRequest(&testpb.SimpleRequest{ResponseSize: 3})); err != nil {
			t.Fatal(err)
		}
		wantEvents("begin in out end")
		_, err := client.CallUnary(ctxT(t), connect.NewRequest(&testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound)}}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("%s: %v", addr, err)
		}
		wantEvents("begin in out end begin in end:NotFound")
	}
}
