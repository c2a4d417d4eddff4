package leangrpc_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// h2cServer serves h with x/net's HTTP/2 server over cleartext, as a peer
// that does whatever a test needs on the wire.
func h2cServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http2.Server{}
	done := make(chan struct{})
	conns := make(chan net.Conn, 16)
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns <- c
			go srv.ServeConn(c, &http2.ServeConnOpts{Handler: h})
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}

func leanClient(t *testing.T, addr string) testgrpc.TestServiceClient {
	t.Helper()
	cc, err := leangrpc.NewClient(addr, leangrpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

func grpcFrame(flag byte, msg []byte) []byte {
	b := make([]byte, 5+len(msg))
	b[0] = flag
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

// TestClientAgainstOddServers checks the client's status for answers a
// gRPC server would not give.
func TestClientAgainstOddServers(t *testing.T) {
	reply, _ := proto.Marshal(&testpb.SimpleResponse{Username: "u"})
	tests := []struct {
		name string
		h    http.HandlerFunc
		code codes.Code
		msg  string
	}{
		{"404", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, codes.Unimplemented, "404"},
		{"503", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }, codes.Unavailable, "503"},
		{"401", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(401) }, codes.Unauthenticated, "401"},
		{"200 html", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<html>"))
		}, codes.Unknown, "content-type"},
		{"no trailers", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Write(grpcFrame(0, reply))
		}, codes.Internal, "without sending trailers"},
		{"missing grpc-status", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Trailer", "X-Other")
			w.Write(grpcFrame(0, reply))
			w.Header().Set("X-Other", "1")
		}, codes.Unknown, ""},
		{"truncated message", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Trailer", "Grpc-Status")
			w.Write(grpcFrame(0, reply)[:6])
			w.Header().Set("Grpc-Status", "0")
		}, codes.Internal, "incomplete message"},
		{"compressed flag without encoding", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Trailer", "Grpc-Status")
			w.Write(grpcFrame(1, reply))
			w.Header().Set("Grpc-Status", "0")
		}, codes.Internal, "compressed flag"},
		{"bad flag", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Write(grpcFrame(7, reply))
		}, codes.Internal, "payload format"},
		{"rst internal", func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler) // x/net resets the stream with INTERNAL_ERROR
		}, codes.Internal, "RST_STREAM"},
		{"percent-encoded message", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Grpc-Status", "5")
			w.Header().Set("Grpc-Message", "caf%C3%A9 100%25")
			w.WriteHeader(200)
		}, codes.NotFound, "café 100%"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := leanClient(t, h2cServer(t, tc.h))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
			st := status.Convert(err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Errorf("got %v %q, want %v containing %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}
}

// h2cClient is x/net's HTTP/2 client over cleartext.
func h2cClient() *http.Client {
	return &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// TestServerAnswersNonGRPC checks the HTTP answers to requests that are not
// gRPC, and that the connection keeps serving gRPC afterwards. With the web
// protocols off the answers are grpc-go's; with them on, a POST of
// application/json and a GET are Connect requests (web_test.go).
func TestServerAnswersNonGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer(leangrpc.WebProtocols(false))
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(lis)
	defer s.Stop()
	hc := h2cClient()
	defer hc.CloseIdleConnections()
	url := "http://" + lis.Addr().String() + "/grpc.testing.TestService/EmptyCall"
	tests := []struct {
		method, ctype string
		status        int
		grpcStatus    string
	}{
		{"POST", "application/json", http.StatusUnsupportedMediaType, "3"},
		{"POST", "", http.StatusUnsupportedMediaType, "3"},
		{"GET", "application/grpc", http.StatusMethodNotAllowed, "13"},
		{"PUT", "application/grpc", http.StatusMethodNotAllowed, "13"},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, url, bytes.NewReader(grpcFrame(0, nil)))
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.ctype, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Grpc-Status") != tc.grpcStatus {
			t.Errorf("%s %q: HTTP %d grpc-status %q, want %d %q", tc.method, tc.ctype, resp.StatusCode, resp.Header.Get("Grpc-Status"), tc.status, tc.grpcStatus)
		}
	}
	// A well-formed gRPC request on the same client works.
	req, _ := http.NewRequest("POST", url, bytes.NewReader(grpcFrame(0, nil)))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Trailer.Get("Grpc-Status") != "0" || !bytes.Equal(body, grpcFrame(0, nil)) {
		t.Errorf("gRPC over x/net: HTTP %d trailers %v body %x", resp.StatusCode, resp.Trailer, body)
	}
}
