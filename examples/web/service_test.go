package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	pb "google.golang.org/grpc/examples/features/proto/echo"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serve serves srv on a loopback port until the test ends, and returns
// its address.
func serve(t *testing.T, srv *leangrpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestService calls the example's server with grpc-go's client (what the
// page checks in the browser, without one) and fetches its page: one port
// serves both.
func TestService(t *testing.T) {
	page := fstest.MapFS{"index.html": {Data: []byte("<!doctype html>page")}}
	addr := serve(t, newServer(http.FileServer(http.FS(page))))
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewEchoClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-greeting", "bonjour", "x-blob-bin", "\x00\xff")

	var hdr, trl metadata.MD
	res, err := client.UnaryEcho(ctx, &pb.EchoRequest{Message: "hello"}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil || res.GetMessage() != "hello" {
		t.Fatalf("UnaryEcho: %v %v", res, err)
	}
	if first(hdr, "x-echo-greeting") != "bonjour" || first(hdr, "x-blob-bin") != "\x00\xff" || first(hdr, "x-protocol") != "grpc" ||
		first(hdr, "x-deadline-ms") == "" || first(trl, "x-trailer") != "bye" {
		t.Errorf("header %v, trailer %v", hdr, trl)
	}

	_, err = client.UnaryEcho(ctx, &pb.EchoRequest{Message: "fail"})
	checkFailure(t, err)

	stream, err := client.ServerStreamingEcho(ctx, &pb.EchoRequest{Message: "fail"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		res, err := stream.Recv()
		if err != nil {
			checkFailure(t, err)
			break
		}
		got = append(got, res.GetMessage())
	}
	if strings.Join(got, "|") != "fail 1|fail 2" {
		t.Errorf("stream: %q", got)
	}

	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "<!doctype html>page" {
		t.Errorf("GET /: %d %q", resp.StatusCode, b)
	}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func checkFailure(t *testing.T, err error) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || st.Message() != "échec: the message was “fail”" || len(st.Details()) != 1 {
		t.Fatalf("failure: %v, details %v", err, st.Details())
	}
	if info, ok := st.Details()[0].(*errdetails.ErrorInfo); !ok || info.GetReason() != "ECHO_REFUSED" || info.GetMetadata()["message"] != "fail" {
		t.Errorf("detail %v", st.Details()[0])
	}
}
