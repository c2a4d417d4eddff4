package protoalias_test

import (
	"testing"
	"unsafe"

	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/leangrpc/leangrpc/internal/protoalias"
	"github.com/leangrpc/leangrpc/internal/protoalias/testmsg"
)

// aliasCase is an input and the bytes fields of its decoding that must
// alias it (or, in TestSmallBytesCopied, must not).
type aliasCase struct {
	name   string
	mt     messageType
	wire   func(value []byte) []byte
	fields func(m proto.Message) [][]byte
}

// aliasCases put one value at each place where the decoder aliases a
// bytes field itself: singular, optional, implicit-presence, repeated,
// oneof member, and inside a large message field (singular, repeated,
// oneof, lazy, well-known wrapper), in each syntax.
func aliasCases() []aliasCase {
	legacy, modern, edition := generatedType(&testmsg.Legacy{}), generatedType(&testmsg.Modern{}), generatedType(&testmsg.Edition{})
	sealed, request := generatedType(&testmsg.Sealed{}), generatedType(&grpc_testing.SimpleRequest{})
	one := func(num protowire.Number) func([]byte) []byte {
		return func(v []byte) []byte { return lenField(num, v) }
	}
	twice := func(num protowire.Number) func([]byte) []byte {
		return func(v []byte) []byte { return concat(lenField(num, v), lenField(num, v)) }
	}
	nested := func(outer, inner protowire.Number) func([]byte) []byte {
		return func(v []byte) []byte { return lenField(outer, lenField(inner, v)) }
	}
	// withID puts the value in the required payload (2) of a Strict or
	// Guarded, with its required id (1), at field num.
	withID := func(num protowire.Number) func([]byte) []byte {
		return func(v []byte) []byte { return lenField(num, concat(varintField(1, 1), lenField(2, v))) }
	}
	return []aliasCase{
		{"proto2 optional", legacy, one(15), field((*testmsg.Legacy).GetFBytes)},
		{"proto2 repeated", legacy, twice(28), list((*testmsg.Legacy).GetRBytes)},
		{"proto2 oneof", legacy, one(40), field((*testmsg.Legacy).GetCBytes)},
		{"proto2 in message", legacy, nested(30, 15), field(func(m *testmsg.Legacy) []byte { return m.GetChild().GetFBytes() })},
		{"proto2 in repeated message", legacy, nested(31, 28), list(func(m *testmsg.Legacy) [][]byte { return m.GetChildren()[0].GetRBytes() })},
		{"proto2 in oneof message", legacy, nested(42, 40), field(func(m *testmsg.Legacy) []byte { return m.GetCLegacy().GetCBytes() })},
		{"proto2 required", legacy, withID(32), field(func(m *testmsg.Legacy) []byte { return m.GetStrict().GetPayload() })},
		{"proto3 implicit", modern, one(15), field((*testmsg.Modern).GetFBytes)},
		{"proto3 optional", modern, one(17), field((*testmsg.Modern).GetOBytes)},
		{"proto3 repeated", modern, twice(28), list((*testmsg.Modern).GetRBytes)},
		{"proto3 oneof", modern, one(40), field((*testmsg.Modern).GetCBytes)},
		{"proto3 in proto2 message", modern, nested(32, 15), field(func(m *testmsg.Modern) []byte { return m.GetLegacy().GetFBytes() })},
		{"proto3 BytesValue", modern, nested(61, 1), field(func(m *testmsg.Modern) []byte { return m.GetWrapped().GetValue() })},
		{"proto3 Any", modern, nested(60, 2), field(func(m *testmsg.Modern) []byte { return m.GetAny().GetValue() })},
		{"editions explicit", edition, one(3), field((*testmsg.Edition).GetFBytes)},
		{"editions implicit", edition, one(4), field((*testmsg.Edition).GetIBytes)},
		{"editions repeated", edition, twice(13), list((*testmsg.Edition).GetRBytes)},
		{"editions oneof", edition, one(30), field((*testmsg.Edition).GetCBytes)},
		{"editions in message", edition, nested(20, 3), field(func(m *testmsg.Edition) []byte { return m.GetChild().GetFBytes() })},
		{"editions LEGACY_REQUIRED", edition, withID(24), field(func(m *testmsg.Edition) []byte { return m.GetGuarded().GetPayload() })},
		{"opaque", sealed, one(1), field((*testmsg.Sealed).GetFBytes)},
		{"opaque in lazy message", sealed, nested(5, 1), field(func(m *testmsg.Sealed) []byte { return m.GetLazyChild().GetFBytes() })},
		{"opaque in repeated lazy message", sealed, nested(6, 4), list(func(m *testmsg.Sealed) [][]byte { return m.GetLazyChildren()[0].GetRBytes() })},
		{"grpc-go SimpleRequest", request, nested(3, 2), field(func(m *grpc_testing.SimpleRequest) []byte { return m.GetPayload().GetBody() })},
	}
}

// field and list adapt a typed getter to aliasCase.fields.
func field[M proto.Message](get func(M) []byte) func(proto.Message) [][]byte {
	return func(m proto.Message) [][]byte { return [][]byte{get(m.(M))} }
}

func list[M proto.Message](get func(M) [][]byte) func(proto.Message) [][]byte {
	return func(m proto.Message) [][]byte { return get(m.(M)) }
}

// pointsInto reports whether b shares in's memory.
func pointsInto(b, in []byte) bool {
	starts, _ := within(unsafe.Pointer(unsafe.SliceData(b)), len(b), in)
	return starts
}

func TestLargeBytesAlias(t *testing.T) {
	const minField = 64
	for _, c := range aliasCases() {
		t.Run(c.name, func(t *testing.T) {
			for _, n := range []int{minField, 3 * minField} {
				d := checkDecode(t, c.mt, minField, c.wire(filled(n, byte(n))))
				if d.err != nil {
					t.Fatalf("%d bytes: %v", n, d.err)
				}
				if !d.aliased {
					t.Errorf("%d bytes: aliased is false", n)
				}
				for i, b := range c.fields(d.msg) {
					if len(b) != n || !pointsInto(b, d.in) || cap(b) != len(b) {
						t.Errorf("%d bytes: field %d has length %d, capacity %d, in the input: %v", n, i, len(b), cap(b), pointsInto(b, d.in))
					}
				}
			}
		})
	}
}

func TestSmallBytesCopied(t *testing.T) {
	const minField = 64
	for _, c := range aliasCases() {
		t.Run(c.name, func(t *testing.T) {
			// A value one byte short of minField, in an input long enough
			// that the decoder walks it rather than handing it all to proto.
			wire := concat(c.wire(filled(minField-1, 9)), lenField(1000, filled(minField, 0)))
			d := checkDecode(t, c.mt, minField, wire)
			if d.err != nil {
				t.Fatal(d.err)
			}
			if d.aliased {
				t.Error("aliased is true")
			}
			for i, b := range c.fields(d.msg) {
				if len(b) != minField-1 || pointsInto(b, d.in) {
					t.Errorf("field %d has length %d, in the input: %v", i, len(b), pointsInto(b, d.in))
				}
			}
		})
	}
}

// TestFieldsLeftToProtoAreCopied pins down where the decoder does not
// alias, by design: extensions, map values, and groups and DELIMITED
// messages, which protobuf-go decodes whole.
func TestFieldsLeftToProtoAreCopied(t *testing.T) {
	const minField = 64
	big := filled(200, 3)
	group := func(num protowire.Number, body []byte) []byte {
		b := protowire.AppendTag(nil, num, protowire.StartGroupType)
		b = append(b, body...)
		return protowire.AppendTag(b, num, protowire.EndGroupType)
	}
	cases := []struct {
		name string
		mt   messageType
		wire []byte
	}{
		{"proto2 bytes extension", generatedType(&testmsg.Legacy{}), lenField(100, big)},
		{"proto2 message extension", generatedType(&testmsg.Legacy{}), lenField(101, lenField(15, big))},
		{"proto2 map value", generatedType(&testmsg.Legacy{}), lenField(50, concat(lenField(1, []byte("k")), lenField(2, big)))},
		{"proto2 group", generatedType(&testmsg.Legacy{}), group(33, lenField(1, big))},
		{"proto2 oneof group", generatedType(&testmsg.Legacy{}), group(44, lenField(1, big))},
		{"proto3 map of messages", generatedType(&testmsg.Modern{}), lenField(51, concat(varintField(1, 1), lenField(2, lenField(15, big))))},
		{"editions delimited", generatedType(&testmsg.Edition{}), group(21, lenField(3, big))},
		{"editions delimited oneof", generatedType(&testmsg.Edition{}), group(33, lenField(3, big))},
		{"editions bytes extension", generatedType(&testmsg.Edition{}), lenField(100, big)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := checkDecode(t, c.mt, minField, c.wire)
			if d.err != nil {
				t.Fatal(d.err)
			}
			if d.aliased || len(d.views) > 0 {
				t.Errorf("aliased %v, with %d views into the input", d.aliased, len(d.views))
			}
		})
	}
}

func TestDefaultMinField(t *testing.T) {
	for _, c := range []struct {
		minField, n int
		alias       bool
	}{
		{0, protoalias.DefaultMinField, true},
		{-1, protoalias.DefaultMinField, true},
		{0, protoalias.DefaultMinField - 1, false},
	} {
		wire := concat(lenField(15, filled(c.n, 5)), lenField(1000, filled(100, 0)))
		m := new(testmsg.Modern)
		aliased, err := protoalias.Unmarshal(wire, m, c.minField)
		if err != nil {
			t.Fatal(err)
		}
		if aliased != c.alias || pointsInto(m.GetFBytes(), wire) != c.alias {
			t.Errorf("minField %d, %d bytes: aliased %v, field in the input %v; want %v", c.minField, c.n, aliased, pointsInto(m.GetFBytes(), wire), c.alias)
		}
	}
}

// TestResetsMessage checks that Unmarshal replaces what the message held,
// as proto.Unmarshal does, on both its paths.
func TestResetsMessage(t *testing.T) {
	for _, n := range []int{10, 200} {
		m := &testmsg.Legacy{FInt32: proto.Int32(7), RBytes: [][]byte{[]byte("old")}}
		if _, err := protoalias.Unmarshal(lenField(28, filled(n, 1)), m, 64); err != nil {
			t.Fatal(err)
		}
		if m.FInt32 != nil || len(m.GetRBytes()) != 1 || len(m.GetRBytes()[0]) != n {
			t.Errorf("%d bytes: decoded %v", n, textOf(m))
		}
	}
}
