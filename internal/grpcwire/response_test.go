package grpcwire

import (
	"reflect"
	"testing"

	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func hf(kv ...string) []hpack.HeaderField {
	var out []hpack.HeaderField
	for i := 0; i < len(kv); i += 2 {
		out = append(out, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestResponseHeadersRoundTrip(t *testing.T) {
	fields := AppendResponseHeaders(nil, "proto", "", metadata.MD{"x-h": {"v"}, "x-bin": {"\x01"}, ":status": {"500"}})
	if fields[0] != (hpack.HeaderField{Name: ":status", Value: "200"}) || fields[1].Value != "application/grpc+proto" {
		t.Fatalf("fields %v", fields)
	}
	r := ParseResponse(fields, true, false)
	if r.Status != nil || r.Reset || r.Informational {
		t.Fatalf("headers parsed as %+v", r)
	}
	want := metadata.MD{"content-type": {"application/grpc+proto"}, "x-h": {"v"}, "x-bin": {"\x01"}}
	if !reflect.DeepEqual(r.MD, want) {
		t.Errorf("MD %v, want %v", r.MD, want)
	}
}

func TestTrailersOnlyRoundTrip(t *testing.T) {
	st := status.New(codes.PermissionDenied, "no")
	fields := AppendTrailers(nil, true, 0, "", st, metadata.MD{"x-t": {"1"}, "grpc-status-details-bin": {"spoof"}})
	want := hf(":status", "200", "content-type", "application/grpc", "grpc-status", "7", "grpc-message", "no", "x-t", "1")
	if !reflect.DeepEqual(fields, want) {
		t.Fatalf("trailers-only\n got %v\nwant %v", fields, want)
	}
	r := ParseResponse(fields, true, true)
	if r.Status.Code() != codes.PermissionDenied || r.Status.Message() != "no" || r.MD["x-t"][0] != "1" {
		t.Errorf("parsed %+v", r)
	}
	// Plain trailers after headers carry no :status.
	fields = AppendTrailers(nil, false, 0, "", status.New(codes.OK, ""), nil)
	if !reflect.DeepEqual(fields, hf("grpc-status", "0")) {
		t.Errorf("OK trailers %v", fields)
	}
}

func TestParseResponse(t *testing.T) {
	tests := []struct {
		name        string
		fields      []hpack.HeaderField
		first, end  bool
		wantStatus  bool
		code        codes.Code
		reset, info bool
		wantMsg     string
	}{
		{"headers", hf(":status", "200", "content-type", "application/grpc"), true, false, false, 0, false, false, ""},
		{"trailers", hf("grpc-status", "5", "grpc-message", "a%20b"), false, true, true, codes.NotFound, false, false, "a b"},
		{"trailers without grpc-status", hf("x", "y"), false, true, true, codes.Unknown, false, false, ""},
		{"middle headers", hf("x", "y"), false, false, true, codes.Internal, true, false, ""},
		{"bad grpc-status", hf("grpc-status", "x"), false, true, true, codes.Unknown, true, false, ""},
		{"404 non-gRPC", hf(":status", "404", "content-type", "text/html"), true, true, true, codes.Unimplemented, false, false, ""},
		{"503 non-gRPC open", hf(":status", "503"), true, false, true, codes.Unavailable, true, false, ""},
		{"200 non-gRPC", hf(":status", "200", "content-type", "text/plain"), true, true, true, codes.Unknown, false, false, ""},
		{"missing status", hf("content-type", "text/plain"), true, true, true, codes.Internal, false, false, ""},
		{"informational", hf(":status", "100"), true, false, false, 0, false, true, ""},
		{"informational end", hf(":status", "103"), true, true, true, codes.Internal, true, false, ""},
		{"bad binary", hf(":status", "200", "content-type", "application/grpc", "x-bin", "!"), true, false, true, codes.Internal, true, false, ""},
		{"trailers-only", hf(":status", "200", "content-type", "application/grpc", "grpc-status", "14"), true, true, true, codes.Unavailable, false, false, ""},
	}
	for _, tc := range tests {
		r := ParseResponse(tc.fields, tc.first, tc.end)
		if (r.Status != nil) != tc.wantStatus {
			t.Errorf("%s: status %v, want one: %v", tc.name, r.Status, tc.wantStatus)
			continue
		}
		if r.Status != nil && r.Status.Code() != tc.code {
			t.Errorf("%s: code %v (%q), want %v", tc.name, r.Status.Code(), r.Status.Message(), tc.code)
		}
		if tc.wantMsg != "" && r.Status.Message() != tc.wantMsg {
			t.Errorf("%s: message %q, want %q", tc.name, r.Status.Message(), tc.wantMsg)
		}
		if r.Reset != tc.reset || r.Informational != tc.info {
			t.Errorf("%s: reset %v informational %v, want %v %v", tc.name, r.Reset, r.Informational, tc.reset, tc.info)
		}
	}
}
