package grpcwire

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

func TestRequestRoundTrip(t *testing.T) {
	in := Request{
		Method:         "/pkg.Svc/Do",
		Authority:      "localhost:50051",
		ContentSubtype: "json",
		Timeout:        1500 * time.Millisecond,
		HasTimeout:     true,
		AcceptEncoding: "gzip",
		UserAgent:      "leangrpc-go/0.1 grpc-go/1.85.0",
		MD: metadata.MD{
			"x-a":         {"1", "2"},
			"x-trace-bin": {"\x00\xff\x10"},
			"grpc-status": {"7"}, // reserved: dropped
			"te":          {"x"}, // reserved: dropped
		},
	}
	fields := AppendRequestHeaders(nil, &in)
	wantPrefix := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/pkg.Svc/Do"},
		{Name: ":authority", Value: "localhost:50051"},
		{Name: "content-type", Value: "application/grpc+json"},
		{Name: "user-agent", Value: in.UserAgent},
		{Name: "te", Value: "trailers"},
		{Name: "grpc-accept-encoding", Value: "gzip"},
		{Name: "grpc-timeout", Value: "1500000u"},
	}
	if !reflect.DeepEqual(fields[:len(wantPrefix)], wantPrefix) {
		t.Fatalf("header prefix\n got %v\nwant %v", fields[:len(wantPrefix)], wantPrefix)
	}
	got, rej := ParseRequest(fields)
	if rej != nil {
		t.Fatalf("ParseRequest rejected: %v", rej)
	}
	if got.Method != in.Method || got.Authority != in.Authority || got.ContentSubtype != "json" ||
		got.Timeout != in.Timeout || !got.HasTimeout || got.AcceptEncoding != "gzip" || got.UserAgent != in.UserAgent || got.Scheme != "http" {
		t.Errorf("ParseRequest = %+v", got)
	}
	wantMD := metadata.MD{
		":authority":           {"localhost:50051"},
		"content-type":         {"application/grpc+json"},
		"user-agent":           {in.UserAgent},
		"grpc-accept-encoding": {"gzip"},
		"x-a":                  {"1", "2"},
		"x-trace-bin":          {"\x00\xff\x10"},
	}
	if !reflect.DeepEqual(got.MD, wantMD) {
		t.Errorf("MD\n got %v\nwant %v", got.MD, wantMD)
	}
}

func base(extra ...hpack.HeaderField) []hpack.HeaderField {
	f := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/a.B/C"},
		{Name: ":authority", Value: "h"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	}
	return append(f, extra...)
}

func replace(fields []hpack.HeaderField, name, value string) []hpack.HeaderField {
	out := []hpack.HeaderField{}
	for _, f := range fields {
		if f.Name == name {
			if value == "" {
				continue
			}
			f.Value = value
		}
		out = append(out, f)
	}
	return out
}

func TestParseRequestRejects(t *testing.T) {
	tests := []struct {
		name   string
		fields []hpack.HeaderField
		rst    h2frame.ErrCode
		http   int
		code   codes.Code
	}{
		{"connection header", base(hpack.HeaderField{Name: "connection", Value: "close"}), h2frame.ErrCodeProtocol, 0, 0},
		{"json content-type", replace(base(), "content-type", "application/json"), 0, http.StatusUnsupportedMediaType, codes.InvalidArgument},
		{"no content-type", replace(base(), "content-type", ""), 0, http.StatusUnsupportedMediaType, codes.InvalidArgument},
		{"GET", replace(base(), ":method", "GET"), 0, http.StatusMethodNotAllowed, codes.Internal},
		{"bad timeout", base(hpack.HeaderField{Name: "grpc-timeout", Value: "1x"}), 0, http.StatusBadRequest, codes.Internal},
		{"long timeout", base(hpack.HeaderField{Name: "grpc-timeout", Value: "123456789S"}), 0, http.StatusBadRequest, codes.Internal},
		{"bad binary", base(hpack.HeaderField{Name: "x-bin", Value: "!!"}), 0, http.StatusBadRequest, codes.Internal},
		{"two authorities", base(hpack.HeaderField{Name: ":authority", Value: "g"}), 0, http.StatusBadRequest, codes.Internal},
		{"two hosts", base(hpack.HeaderField{Name: "host", Value: "a"}, hpack.HeaderField{Name: "host", Value: "b"}), 0, http.StatusBadRequest, codes.Internal},
		{"no authority", replace(base(), ":authority", ""), 0, http.StatusBadRequest, codes.Internal},
		{"path without slash", replace(base(), ":path", "a.B/C"), 0, http.StatusOK, codes.Unimplemented},
		{"no path", replace(base(), ":path", ""), 0, http.StatusOK, codes.Unimplemented},
	}
	for _, tc := range tests {
		_, rej := ParseRequest(tc.fields)
		if rej == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if tc.rst != 0 {
			if !rej.RST || rej.Code != tc.rst {
				t.Errorf("%s: %v, want RST %v", tc.name, rej, tc.rst)
			}
			continue
		}
		if rej.RST || rej.HTTPStatus != tc.http || rej.Status.Code() != tc.code {
			t.Errorf("%s: %v (code %v), want HTTP %d code %v", tc.name, rej, rej.Status.Code(), tc.http, tc.code)
		}
	}
}

func TestParseRequestHostBecomesAuthority(t *testing.T) {
	r, rej := ParseRequest(replace(base(hpack.HeaderField{Name: "host", Value: "example:1"}), ":authority", ""))
	if rej != nil {
		t.Fatal(rej)
	}
	if r.Authority != "example:1" || r.MD[":authority"][0] != "example:1" || r.MD["host"] != nil {
		t.Errorf("authority %q, md %v", r.Authority, r.MD)
	}
	// With :authority present, host is dropped.
	r, rej = ParseRequest(base(hpack.HeaderField{Name: "host", Value: "other"}))
	if rej != nil || r.Authority != "h" || r.MD["host"] != nil {
		t.Errorf("authority %q, md %v, rej %v", r.Authority, r.MD, rej)
	}
}

func TestSplitMethod(t *testing.T) {
	tests := []struct {
		in, svc, m string
		ok         bool
	}{
		{"/a.B/C", "a.B", "C", true},
		{"/a/b/c", "a/b", "c", true},
		{"/nomethod", "", "", false},
		{"a.B/C", "", "", false},
		{"", "", "", false},
		{"//", "", "", true},
	}
	for _, tc := range tests {
		s, m, ok := SplitMethod(tc.in)
		if s != tc.svc || m != tc.m || ok != tc.ok {
			t.Errorf("SplitMethod(%q) = %q, %q, %v", tc.in, s, m, ok)
		}
	}
}

func TestParseRequestScratch(t *testing.T) {
	scratch := make([]string, 16)
	r, rej := ParseRequestScratch(base(hpack.HeaderField{Name: "x-a", Value: "1"}), scratch)
	if rej != nil {
		t.Fatal(rej)
	}
	if r.MD != nil {
		t.Errorf("MD built at parse: %v", r.MD)
	}
	if len(r.mdPairs) == 0 || &r.mdPairs[0] != &scratch[0] {
		t.Error("metadata fields not kept in scratch")
	}
	md := r.BuildMD()
	want, _ := ParseRequest(base(hpack.HeaderField{Name: "x-a", Value: "1"}))
	if !reflect.DeepEqual(md, want.MD) || md["x-a"][0] != "1" {
		t.Errorf("BuildMD = %v, ParseRequest's MD %v", md, want.MD)
	}
	md["x-a"] = append(md["x-a"], "2")
	if md[":authority"][0] != "h" || len(md["content-type"]) != 1 {
		t.Errorf("append clobbered a neighbour: %v", md)
	}
	// Too small a scratch still keeps every field.
	r, _ = ParseRequestScratch(base(), make([]string, 1))
	if md := r.BuildMD(); md[":authority"][0] != "h" {
		t.Errorf("md %v", md)
	}
}

func TestParseResponseNoMD(t *testing.T) {
	r := ParseResponseNoMD(hf(":status", "200", "content-type", "application/grpc", "x", "y"), true, false)
	if r.MD != nil || r.Status != nil {
		t.Errorf("NoMD headers: %+v", r)
	}
	r = ParseResponseNoMD(hf("grpc-status", "5", "grpc-message", "m", "x", "y"), false, true)
	if r.MD != nil || r.Status.Code() != codes.NotFound || r.Status.Message() != "m" {
		t.Errorf("NoMD trailers: %+v", r)
	}
}

// A retried attempt's request carries grpc-previous-rpc-attempts after the
// timeout, and the server shows it to handlers as grpc-go's does; a first
// attempt carries none.
func TestRequestPreviousAttempts(t *testing.T) {
	for _, n := range []int32{0, 3} {
		fields := AppendRequestHeaders(nil, &Request{Method: "/p.S/M", Authority: "a", PreviousAttempts: n})
		v, ok := "", false
		for _, f := range fields {
			if f.Name == "grpc-previous-rpc-attempts" {
				v, ok = f.Value, true
			}
		}
		if want := n > 0; ok != want || ok && v != "3" {
			t.Errorf("PreviousAttempts %d: field %q present=%v", n, v, ok)
		}
		got, rej := ParseRequest(fields)
		if rej != nil {
			t.Fatal(rej)
		}
		if g := got.MD.Get("grpc-previous-rpc-attempts"); (len(g) == 1 && g[0] == "3") != (n > 0) {
			t.Errorf("PreviousAttempts %d: handler metadata %q", n, g)
		}
	}
}
