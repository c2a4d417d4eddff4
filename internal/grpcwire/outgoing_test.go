package grpcwire

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestOutgoingRaw: the linked outgoingRaw returns what was attached, keys
// as written; a grpc-go release that changed the function would fail here.
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
}

// TestCheckOutgoingMD: grpc-go's rules and messages, on the pairs as they
// were attached.
func TestCheckOutgoingMD(t *testing.T) {
	bg := context.Background()
	for _, tc := range []struct {
		ctx  context.Context
		want string // "" for valid
	}{
		{bg, ""},
		{metadata.NewOutgoingContext(bg, metadata.MD{"key": {"value", ""}, "a.b_c-9": {"~ !"}, "key-bin": {"\x00\xff\n"}}), ""},
		{metadata.NewOutgoingContext(bg, metadata.Pairs("Upper", "v")), ""}, // lowercased by Pairs
		{metadata.AppendToOutgoingContext(bg, "Upper", "v"), ""},            // and by AppendToOutgoingContext
		{metadata.NewOutgoingContext(bg, metadata.MD{"Upper": {"v"}}), `header key "Upper" contains illegal characters not in [0-9a-z-_.]`},
		{metadata.NewOutgoingContext(bg, metadata.MD{"": {"v"}}), "there is an empty key in the header"},
		{metadata.AppendToOutgoingContext(bg, "a key", "v"), `header key "a key" contains illegal characters not in [0-9a-z-_.]`},
		{metadata.AppendToOutgoingContext(bg, "key", "a\nb"), `header key "key" contains value with non-printable ASCII characters`},
		{metadata.NewOutgoingContext(bg, metadata.Pairs("key", "é")), `header key "key" contains value with non-printable ASCII characters`},
	} {
		err := CheckOutgoingMD(tc.ctx)
		if tc.want == "" {
			if err != nil {
				t.Errorf("CheckOutgoingMD(%v) = %v, want nil", tc.ctx, err)
			}
			continue
		}
		if status.Code(err) != codes.Internal || status.Convert(err).Message() != tc.want {
			t.Errorf("CheckOutgoingMD(%v) = %v, want Internal %q", tc.ctx, err, tc.want)
		}
	}
}
