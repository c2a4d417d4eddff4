package grpcwire

import (
	"reflect"
	"testing"

	"github.com/leangrpc/leangrpc/internal/hpack"
	"google.golang.org/grpc/metadata"
)

func parsedMD(t *testing.T, scratch []string, extra ...string) Request {
	t.Helper()
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/s/m"}, {Name: ":authority", Value: "a.example"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "user-agent", Value: "ua"},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		fields = append(fields, hpack.HeaderField{Name: extra[i], Value: extra[i+1]})
	}
	r, rej := ParseRequestScratch(fields, scratch)
	if rej != nil {
		t.Fatalf("request refused: %+v", rej)
	}
	return r
}

// Calls with the same fields share one map; other fields get their own,
// and the cache keeps no reference to a call's scratch.
func TestMDCacheSharesEqualFields(t *testing.T) {
	var c MDCache
	scratch := make([]string, 16)
	r1 := parsedMD(t, scratch, "k", "v1")
	m1 := c.get(&r1)
	r2 := parsedMD(t, scratch, "k", "v1")
	m2 := c.get(&r2)
	if reflect.ValueOf(m1).Pointer() != reflect.ValueOf(m2).Pointer() {
		t.Error("two calls with the same fields got different maps")
	}
	want := metadata.MD{":authority": {"a.example"}, "content-type": {"application/grpc"}, "user-agent": {"ua"}, "k": {"v1"}}
	if !reflect.DeepEqual(m2, want) {
		t.Errorf("shared map %v, want %v", m2, want)
	}
	// The next call reuses the scratch with other values.
	r3 := parsedMD(t, scratch, "k", "v2")
	m3 := c.get(&r3)
	if got := m3.Get("k"); len(got) != 1 || got[0] != "v2" {
		t.Errorf("a call with other fields got k=%v, want [v2]", got)
	}
	if got := m1.Get("k"); len(got) != 1 || got[0] != "v1" {
		t.Errorf("an earlier call's map changed: k=%v, want [v1]", got)
	}
	r4 := parsedMD(t, scratch, "k", "v1")
	if m4 := c.get(&r4); m4.Get("k")[0] != "v1" {
		t.Errorf("back to the first fields: k=%v, want [v1]", m4.Get("k"))
	}
	r5 := parsedMD(t, scratch)
	if m5 := c.get(&r5); len(m5.Get("k")) != 0 {
		t.Errorf("a call without k sees k=%v", m5.Get("k"))
	}
}
