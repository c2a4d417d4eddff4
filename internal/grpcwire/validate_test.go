package grpcwire

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestOutgoingRaw: the linked outgoingRaw returns what was attached, which
// FromOutgoingContext merges and lowercases; a grpc-go release that
// changed the function would fail here.
func TestOutgoingRaw(t *testing.T) {
	if md, added, ok := outgoingRaw(context.Background()); md != nil || added != nil || ok {
		t.Fatalf("no metadata: outgoingRaw = %v, %v, %v", md, added, ok)
	}
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.MD{"Upper": {"a"}, "lower": {"b", "c"}})
	ctx = metadata.AppendToOutgoingContext(ctx, "k1", "v1", "k2", "v2")
	ctx = metadata.AppendToOutgoingContext(ctx, "k3", "v3")
	md, added, ok := outgoingRaw(ctx)
	if !ok || !reflect.DeepEqual(md, metadata.MD{"Upper": {"a"}, "lower": {"b", "c"}}) ||
		!reflect.DeepEqual(added, [][]string{{"k1", "v1", "k2", "v2"}, {"k3", "v3"}}) {
		t.Fatalf("outgoingRaw = %v, %v, %v", md, added, ok)
	}
	got, err := OutgoingMD(metadata.NewOutgoingContext(context.Background(), metadata.Pairs("Key", "v")))
	if want, _ := metadata.FromOutgoingContext(metadata.NewOutgoingContext(context.Background(), metadata.Pairs("key", "v"))); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("OutgoingMD = %v, %v; want %v", got, err, want)
	}
}

// TestValidateMD: grpc-go's rules and messages for metadata to send.
func TestValidateMD(t *testing.T) {
	for _, tc := range []struct {
		md   metadata.MD
		want string // "" for valid
	}{
		{metadata.MD{"key": {"value", ""}, "a.b_c-9": {"~ !"}, ":authority": {"x"}}, ""},
		{metadata.MD{"key-bin": {"\x00\xff\n"}}, ""},
		{metadata.MD{"": {"v"}}, "there is an empty key in the header"},
		{metadata.MD{"Key": {"v"}}, `header key "Key" contains illegal characters not in [0-9a-z-_.]`},
		{metadata.MD{"a key": {"v"}}, `header key "a key" contains illegal characters not in [0-9a-z-_.]`},
		{metadata.MD{"key": {"ok", "a\nb"}}, `header key "key" contains value with non-printable ASCII characters`},
		{metadata.MD{"key": {"é"}}, `header key "key" contains value with non-printable ASCII characters`},
		{metadata.MD{":path": {"\x7f"}}, `header key ":path" contains value with non-printable ASCII characters`},
	} {
		err := ValidateMD(tc.md)
		if tc.want == "" {
			if err != nil {
				t.Errorf("ValidateMD(%v) = %v, want nil", tc.md, err)
			}
			continue
		}
		if status.Code(err) != codes.Internal || status.Convert(err).Message() != tc.want {
			t.Errorf("ValidateMD(%v) = %v, want Internal %q", tc.md, err, tc.want)
		}
	}
	valid, err := ValidPairs(metadata.MD{"good": {"v"}, "Bad": {"v"}})
	if err == nil || !reflect.DeepEqual(valid, metadata.MD{"good": {"v"}}) {
		t.Errorf("ValidPairs = %v, %v; want only good and an error", valid, err)
	}
}
