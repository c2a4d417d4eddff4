package webwire

import "testing"

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		method, ctype, path string
		want                Protocol
		codec               string
	}{
		{"POST", "application/grpc", "/s/m", GRPC, ""},
		{"POST", "application/grpc+proto", "/s/m", GRPC, "proto"},
		{"POST", "application/grpc;json", "/s/m", GRPC, "json"},
		{"POST", "application/grpc-web", "/s/m", GRPCWeb, ""},
		{"POST", "application/grpc-web+json", "/s/m", GRPCWeb, "json"},
		{"POST", "application/grpc-web-text+proto", "/s/m", GRPCWebText, "proto"},
		{"POST", "Application/GRPC-Web-Text", "/s/m", GRPCWebText, ""},
		{"POST", "application/connect+proto", "/s/m", ConnectStream, "proto"},
		{"POST", "application/connect", "/s/m", None, ""},
		{"POST", "application/proto", "/s/m", ConnectUnary, "proto"},
		{"POST", "application/json; charset=utf-8", "/s/m", ConnectUnary, "json"},
		{"POST", "application/grpcfoo", "/s/m", ConnectUnary, "grpcfoo"},
		{"POST", "text/plain", "/s/m", None, ""},
		{"POST", "", "/s/m", None, ""},
		{"POST", "application/", "/s/m", None, ""},
		{"POST", "application/x+y", "/s/m", None, ""},
		{"GET", "", "/s/m?encoding=proto&message=", ConnectUnary, ""},
		{"GET", "", "/s/m?message=x", None, ""},
		{"GET", "", "/", None, ""},
		{"PUT", "application/grpc", "/s/m", None, ""},
	} {
		p, codec := Classify(tc.method, tc.ctype, tc.path)
		if p != tc.want || codec != tc.codec {
			t.Errorf("Classify(%q, %q, %q) = %v %q, want %v %q", tc.method, tc.ctype, tc.path, p, codec, tc.want, tc.codec)
		}
	}
}
