package protoalias_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/leangrpc/leangrpc/internal/protoalias/testmsg"
)

// TestWireTypeMismatch sends fields with a wire type their declaration
// does not have. protobuf-go keeps such a field as an unknown field, so
// the decoder must not take a length-delimited value as a bytes or
// message field unless the field is declared as one: a group, a
// DELIMITED message, a string or a packed scalar sent length-delimited is
// not a field to alias or descend into.
func TestWireTypeMismatch(t *testing.T) {
	const minField = 32
	big := filled(100, 4)
	varints := bytes.Repeat([]byte{0x81, 0x01}, 50)
	asGroup := func(num protowire.Number, body []byte) []byte {
		b := protowire.AppendTag(nil, num, protowire.StartGroupType)
		return protowire.AppendTag(append(b, body...), num, protowire.EndGroupType)
	}
	legacy, edition := generatedType(&testmsg.Legacy{}), generatedType(&testmsg.Edition{})
	cases := []struct {
		name    string
		mt      messageType
		wire    []byte
		unknown bool // whether the field ends up in the unknown fields
	}{
		{"group sent length-delimited", legacy, lenField(33, lenField(1, big)), true},
		{"oneof group sent length-delimited", legacy, lenField(44, lenField(1, big)), true},
		{"DELIMITED message sent length-delimited", edition, lenField(21, lenField(3, big)), true},
		{"repeated DELIMITED message sent length-delimited", edition, lenField(23, lenField(3, big)), true},
		{"message sent as a group", legacy, asGroup(30, lenField(15, big)), true},
		{"bytes sent as a varint", legacy, concat(varintField(15, 1), lenField(1000, big)), true},
		{"string sent length-delimited", legacy, lenField(14, big), false},
		{"packed int32", legacy, lenField(21, varints), false},
		{"packed sint64", legacy, lenField(22, varints), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := checkDecode(t, c.mt, minField, c.wire)
			if d.err != nil {
				t.Fatal(d.err)
			}
			if d.aliased {
				t.Error("aliased is true")
			}
			if got := len(d.msg.ProtoReflect().GetUnknown()) > 0; got != c.unknown {
				t.Errorf("unknown fields present: %v, want %v", got, c.unknown)
			}
		})
	}
}
