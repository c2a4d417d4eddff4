package protoalias_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leangrpc/leangrpc/internal/protoalias"
	"github.com/leangrpc/leangrpc/internal/protoalias/testmsg"
)

// TestRequiredFields checks that a message missing a required field fails
// to decode as it does with proto.Unmarshal, wherever the field is, and
// that a required field supplied by a later occurrence of its message
// counts, as the check is made once the whole input is decoded.
func TestRequiredFields(t *testing.T) {
	const minField = 64
	big := filled(100, 1)
	strict, legacy, edition := generatedType(&testmsg.Strict{}), generatedType(&testmsg.Legacy{}), generatedType(&testmsg.Edition{})
	cases := []struct {
		name string
		mt   messageType
		wire []byte
		ok   bool
	}{
		{"top level, id missing", strict, lenField(2, big), false},
		{"top level, payload missing", strict, concat(varintField(1, 1), lenField(5, big)), false},
		{"top level, both set", strict, concat(lenField(2, big), varintField(1, 1)), true},
		{"in a large message", legacy, lenField(32, lenField(2, big)), false},
		{"in a small message", legacy, concat(lenField(32, varintField(1, 1)), lenField(1000, big)), false},
		{"two levels down", legacy, lenField(32, concat(varintField(1, 1), lenField(2, big), lenField(3, lenField(2, big)))), false},
		{"in a repeated message", strict, concat(varintField(1, 1), lenField(2, big), lenField(4, lenField(2, big))), false},
		{"supplied by a later occurrence", legacy, concat(lenField(32, lenField(2, big)), lenField(32, varintField(1, 1))), true},
		{"supplied by an earlier occurrence", legacy, concat(lenField(32, varintField(1, 1)), lenField(32, lenField(2, big))), true},
		{"in an extension", legacy, lenField(104, lenField(2, big)), false},
		{"editions LEGACY_REQUIRED missing", edition, lenField(24, lenField(2, big)), false},
		{"editions LEGACY_REQUIRED set", edition, lenField(24, concat(lenField(2, big), varintField(1, 1))), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := checkDecode(t, c.mt, minField, c.wire)
			if (d.err == nil) != c.ok {
				t.Errorf("error %v, want success %v", d.err, c.ok)
			}
		})
	}
}

// TestRequiredInOneofMember: a required field missing in a message that
// is a oneof's third member. protobuf-go v1.36.12's proto.Unmarshal
// accepts it, although proto.CheckInitialized rejects what it returns;
// protoalias gives what proto.Unmarshal gives, whether it walks the input
// or not.
func TestRequiredInOneofMember(t *testing.T) {
	// Legacy{c_legacy: {strict: {payload: …}}}: c_legacy is the third
	// member of the oneof choice, and strict misses its id.
	wire := lenField(42, lenField(32, lenField(2, filled(100, 1))))

	m := new(testmsg.Legacy)
	wantErr := proto.Unmarshal(wire, m)
	for _, minField := range []int{64, 1 << 20} {
		got := new(testmsg.Legacy)
		if _, err := protoalias.Unmarshal(wire, got, minField); (err == nil) != (wantErr == nil) {
			t.Errorf("minField %d: error %v, proto.Unmarshal's %v", minField, err, wantErr)
		} else if err == nil && !proto.Equal(got, m) {
			t.Errorf("minField %d: decoded message differs from proto.Unmarshal's", minField)
		}
	}
}
