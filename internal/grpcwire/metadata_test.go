package grpcwire

import (
	"reflect"
	"slices"
	"testing"

	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/metadata"
)

func TestContentSubtype(t *testing.T) {
	tests := []struct {
		in   string
		sub  string
		grpc bool
	}{
		{"application/grpc", "", true},
		{"application/grpc+proto", "proto", true},
		{"application/grpc+json", "json", true},
		{"application/grpc;foo", "foo", true},
		{"application/grpc+", "", true},
		{"application/grpcx", "", false},
		{"application/json", "", false},
		{"text/plain", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		sub, ok := ContentSubtype(tc.in)
		if sub != tc.sub || ok != tc.grpc {
			t.Errorf("ContentSubtype(%q) = %q, %v; want %q, %v", tc.in, sub, ok, tc.sub, tc.grpc)
		}
	}
	for _, sub := range []string{"", "proto", "json", "custom"} {
		got, ok := ContentSubtype(ContentType(sub))
		if !ok || got != sub {
			t.Errorf("ContentSubtype(ContentType(%q)) = %q, %v", sub, got, ok)
		}
	}
}

func TestIsReservedHeader(t *testing.T) {
	reserved := []string{":path", ":authority", ":status", "content-type", "user-agent", "te",
		"grpc-message-type", "grpc-encoding", "grpc-message", "grpc-status", "grpc-timeout"}
	for _, h := range reserved {
		if !IsReservedHeader(h) {
			t.Errorf("IsReservedHeader(%q) = false", h)
		}
	}
	for _, h := range []string{"grpc-status-details-bin", "grpc-accept-encoding", "x-user", "foo-bin", "authorization"} {
		if IsReservedHeader(h) {
			t.Errorf("IsReservedHeader(%q) = true", h)
		}
	}
}

func TestDecodeBinary(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{"AAEC", "\x00\x01\x02", false},
		{"AAECAw", "\x00\x01\x02\x03", false},   // unpadded
		{"AAECAw==", "\x00\x01\x02\x03", false}, // padded
		{"", "", false},
		{"A", "", true},
		{"!!!!", "", true},
		{"AAECAw=", "", true},
	}
	for _, tc := range tests {
		got, err := DecodeBinary(tc.in)
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("DecodeBinary(%q) = %q, %v; want %q, err %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	if got := EncodeBinary("\x00\x01\x02\x03"); got != "AAECAw" {
		t.Errorf("EncodeBinary = %q, want unpadded AAECAw", got)
	}
}

func TestAppendMetadata(t *testing.T) {
	md := metadata.MD{
		"x-a":          {"1", "2"},
		"x-bin":        {"\xff\x00"},
		"content-type": {"evil"},
		":path":        {"/evil"},
		"grpc-status":  {"0"},
		"te":           {"gzip"},
	}
	got := AppendMetadata(nil, md)
	slices.SortFunc(got, func(a, b hpack.HeaderField) int {
		if a.Name != b.Name {
			return compare(a.Name, b.Name)
		}
		return compare(a.Value, b.Value)
	})
	want := []hpack.HeaderField{{Name: "x-a", Value: "1"}, {Name: "x-a", Value: "2"}, {Name: "x-bin", Value: "/wA"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AppendMetadata = %v, want %v", got, want)
	}
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestMDBuilderValuesDoNotAlias(t *testing.T) {
	b := newMDBuilder(3)
	b.add("a", "1")
	b.add("b", "2")
	b.add("a", "3")
	b.md["a"] = append(b.md["a"], "4")
	b.md["b"] = append(b.md["b"], "5")
	want := metadata.MD{"a": {"1", "3", "4"}, "b": {"2", "5"}}
	if !reflect.DeepEqual(b.md, want) {
		t.Errorf("md %v, want %v", b.md, want)
	}
	var lazy mdBuilder
	lazy.add("x", "y")
	if lazy.md["x"][0] != "y" {
		t.Errorf("lazy md %v", lazy.md)
	}
}
