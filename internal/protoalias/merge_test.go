package protoalias_test

import (
	"bytes"
	"testing"

	"github.com/leangrpc/leangrpc/internal/protoalias/testmsg"
)

// The wire format is a concatenation, and a decoder that decodes runs of
// it separately must keep the order in which they combine: the last
// occurrence of a singular field or oneof wins, repeated fields append in
// order, and message fields merge. checkDecode compares each case with
// proto.Unmarshal; the tests add what the result must be.

const mergeMinField = 32

var (
	large  = filled(100, 1)
	large2 = filled(150, 2)
	small  = []byte("small")
)

func TestSingularBytesLastWins(t *testing.T) {
	legacy := generatedType(&testmsg.Legacy{})
	for _, c := range []struct {
		name string
		wire []byte
		want []byte
	}{
		{"large then small", concat(lenField(15, large), lenField(15, small)), small},
		{"small then large", concat(lenField(15, small), lenField(15, large)), large},
		{"large then large", concat(lenField(15, large), lenField(15, large2)), large2},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := checkDecode(t, legacy, mergeMinField, c.wire)
			got := d.msg.(*testmsg.Legacy).GetFBytes()
			if !bytes.Equal(got, c.want) {
				t.Errorf("f_bytes is %q", got)
			}
			if isLarge := len(c.want) >= mergeMinField; pointsInto(got, d.in) != isLarge || isLarge && !d.aliased {
				t.Errorf("f_bytes in the input: %v, aliased %v", pointsInto(got, d.in), d.aliased)
			}
		})
	}
}

func TestOneofLastMemberWins(t *testing.T) {
	legacy := generatedType(&testmsg.Legacy{})
	const cBytes, cString, cLegacy = 40, 41, 42
	for _, c := range []struct {
		name    string
		wire    []byte
		check   func(m *testmsg.Legacy) bool
		aliased bool
	}{
		{"large bytes then small string", concat(lenField(cBytes, large), lenField(cString, small)),
			func(m *testmsg.Legacy) bool { return m.GetCString() == string(small) }, false},
		{"small string then large bytes", concat(lenField(cString, small), lenField(cBytes, large)),
			func(m *testmsg.Legacy) bool { return bytes.Equal(m.GetCBytes(), large) }, true},
		{"large bytes then large message", concat(lenField(cBytes, large), lenField(cLegacy, lenField(15, large2))),
			func(m *testmsg.Legacy) bool { return bytes.Equal(m.GetCLegacy().GetFBytes(), large2) }, true},
		{"large message then small bytes", concat(lenField(cLegacy, lenField(15, large)), lenField(cBytes, small)),
			func(m *testmsg.Legacy) bool { return bytes.Equal(m.GetCBytes(), small) }, false},
		{"large message, string, small message", concat(lenField(cLegacy, lenField(15, large)), lenField(cString, small), lenField(cLegacy, varintField(1, 3))),
			func(m *testmsg.Legacy) bool { return m.GetCLegacy().GetFInt32() == 3 && m.GetCLegacy().FBytes == nil }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := checkDecode(t, legacy, mergeMinField, c.wire)
			if !c.check(d.msg.(*testmsg.Legacy)) {
				t.Errorf("decoded %s", textOf(d.msg))
			}
			if c.aliased && !d.aliased {
				t.Error("aliased false, though the result holds a view") // true without one only costs the buffer
			}
		})
	}
}

func TestRepeatedOrder(t *testing.T) {
	values := [][]byte{small, large, []byte("x"), large2, large, {}}
	var wire, children []byte
	for _, v := range values {
		wire = append(wire, lenField(28, v)...)
		children = append(children, lenField(31, lenField(15, v))...)
	}
	d := checkDecode(t, generatedType(&testmsg.Legacy{}), mergeMinField, concat(wire, children))
	m := d.msg.(*testmsg.Legacy)
	if len(m.GetRBytes()) != len(values) || len(m.GetChildren()) != len(values) {
		t.Fatalf("decoded %d r_bytes and %d children, want %d", len(m.GetRBytes()), len(m.GetChildren()), len(values))
	}
	for i, v := range values {
		isLarge := len(v) >= mergeMinField
		for _, got := range [][]byte{m.GetRBytes()[i], m.GetChildren()[i].GetFBytes()} {
			if !bytes.Equal(got, v) || pointsInto(got, d.in) != isLarge {
				t.Errorf("element %d is %d bytes, in the input %v; want %d bytes, in the input %v", i, len(got), pointsInto(got, d.in), len(v), isLarge)
			}
		}
	}
}

func TestMessageFieldMerges(t *testing.T) {
	for _, c := range []struct {
		name  string
		wire  []byte
		check func(m *testmsg.Legacy) bool
	}{
		{"small, large, small", concat(
			lenField(30, concat(varintField(1, 1), lenField(28, small))),
			lenField(30, concat(lenField(15, large), lenField(28, large2))),
			lenField(30, concat(lenField(14, []byte("s")), lenField(28, small)))),
			func(m *testmsg.Legacy) bool {
				c := m.GetChild()
				return c.GetFInt32() == 1 && bytes.Equal(c.GetFBytes(), large) && c.GetFString() == "s" &&
					len(c.GetRBytes()) == 3 && bytes.Equal(c.GetRBytes()[1], large2)
			}},
		{"two large occurrences", concat(
			lenField(30, lenField(30, concat(lenField(15, large), varintField(2, 9)))),
			lenField(30, lenField(30, lenField(28, large2)))),
			func(m *testmsg.Legacy) bool {
				g := m.GetChild().GetChild()
				return bytes.Equal(g.GetFBytes(), large) && g.GetFInt64() == 9 && len(g.GetRBytes()) == 1
			}},
		{"large then small replaces a bytes field", concat(
			lenField(30, lenField(15, large)),
			lenField(30, lenField(15, small))),
			func(m *testmsg.Legacy) bool { return bytes.Equal(m.GetChild().GetFBytes(), small) }},
		{"oneof message member merges", concat(
			lenField(42, lenField(15, large)),
			lenField(42, varintField(1, 4))),
			func(m *testmsg.Legacy) bool {
				return bytes.Equal(m.GetCLegacy().GetFBytes(), large) && m.GetCLegacy().GetFInt32() == 4
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := checkDecode(t, generatedType(&testmsg.Legacy{}), mergeMinField, c.wire)
			if !c.check(d.msg.(*testmsg.Legacy)) {
				t.Errorf("decoded %s", textOf(d.msg))
			}
		})
	}
}
