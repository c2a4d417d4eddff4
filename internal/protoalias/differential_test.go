package protoalias_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/leangrpc/leangrpc/internal/protoalias"
)

// decoded is what protoalias.Unmarshal made of one input, after
// checkDecode has compared it with proto.Unmarshal.
type decoded struct {
	msg     proto.Message
	aliased bool
	err     error
	in      []byte // the buffer protoalias decoded, which views point into
	views   []view
}

// checkDecode decodes wire with proto.Unmarshal and with
// protoalias.Unmarshal into new messages of type mt, and fails t unless
// protoalias keeps its contract:
//   - it fails exactly when proto.Unmarshal fails (panics when it panics,
//     see errPanicked), and otherwise decodes a message proto.Equal
//     to proto.Unmarshal's;
//   - it never writes into its input;
//   - only bytes values of at least minField bytes point into the input,
//     each with its capacity cut to its length, so that appending to one
//     never writes into the input;
//   - aliased is true when some value points into the input (it may be
//     true without one, when a later occurrence replaced the view).
func checkDecode(t testing.TB, mt messageType, minField int, wire []byte) decoded {
	t.Helper()
	want := mt.new()
	wantErr := recovering(func() error { return proto.Unmarshal(wire, want) })

	// protoalias decodes its own copy, so that a view into it is told
	// apart from a value proto.Unmarshal copied, and a write into it is
	// seen.
	in := bytes.Clone(wire)
	got := mt.new()
	var aliased bool
	err := recovering(func() (err error) {
		aliased, err = protoalias.Unmarshal(in, got, minField)
		return err
	})
	d := decoded{msg: got, aliased: aliased, err: err, in: in}
	if !bytes.Equal(in, wire) {
		t.Fatalf("%s, minField %d: Unmarshal wrote into its input", mt.name, minField)
	}
	if errors.Is(err, errPanicked) != errors.Is(wantErr, errPanicked) {
		t.Fatalf("%s, minField %d: protoalias.Unmarshal error %v, proto.Unmarshal error %v", mt.name, minField, err, wantErr)
	}
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%s, minField %d: protoalias.Unmarshal error %v, proto.Unmarshal error %v", mt.name, minField, err, wantErr)
	}
	if err != nil {
		return d
	}
	if !proto.Equal(got, want) {
		t.Fatalf("%s, minField %d: protoalias.Unmarshal decoded\n%s\nproto.Unmarshal decoded\n%s", mt.name, minField, textOf(got), textOf(want))
	}

	views, problems := viewsOf(got, in, mt.dynamic)
	for _, p := range problems {
		t.Errorf("%s, minField %d: %s", mt.name, minField, p)
	}
	for _, v := range views {
		if len(v.b) < minField {
			t.Errorf("%s, minField %d: %v aliases the input with %d bytes, below minField", mt.name, minField, v.path, len(v.b))
		}
		if cap(v.b) != len(v.b) {
			t.Errorf("%s, minField %d: %v aliases the input with capacity %d for length %d", mt.name, minField, v.path, cap(v.b), len(v.b))
		}
	}
	if !aliased && len(views) > 0 {
		t.Errorf("%s, minField %d: aliased is %v, but %d values point into the input", mt.name, minField, aliased, len(views))
	}
	// What the capacity rule is for: an append to a view reallocates
	// instead of writing over the input bytes that follow it.
	for _, v := range views {
		grown := append(v.b, 0xA5)
		if unsafe.SliceData(grown) == unsafe.SliceData(v.b) {
			t.Errorf("%s, minField %d: appending to %v grew it in place", mt.name, minField, v.path)
		}
	}
	if !bytes.Equal(in, wire) {
		t.Errorf("%s, minField %d: appending to the decoded fields wrote into the input", mt.name, minField)
	}
	if t.Failed() {
		t.FailNow()
	}
	d.views = views
	return d
}

// errPanicked marks a decoder's panic, which recovering turns into an
// error. proto.Unmarshal itself panics on some inputs: protobuf-go
// v1.36.12 decodes a dynamicpb message's map entry by reflection, and an
// entry whose key field comes twice, the second time with the wrong wire
// type, leaves an invalid key that it then uses (proto/decode.go,
// unmarshalMap). protoalias hands map fields to proto, so it must panic
// on the same inputs, and on no others;
// testdata/fuzz/FuzzUnmarshal/bf49d6e8f849f94f is such an input.
var errPanicked = errors.New("decoder panicked")

// recovering runs decode, turning a panic into an errPanicked error.
func recovering(decode func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanicked, p)
		}
	}()
	return decode()
}

// textOf formats m for a failure message, cut short: the messages the
// fuzzers make hold kilobytes.
func textOf(m proto.Message) string {
	const max = 4000
	s := prototext.MarshalOptions{Multiline: true, AllowPartial: true}.Format(m)
	if len(s) > max {
		s = s[:max] + "\n…"
	}
	return s
}
