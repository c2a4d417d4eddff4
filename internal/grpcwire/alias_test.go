package grpcwire

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
)

// gatheredMessage pushes a marshaled m in 16 KiB payloads, as DATA frames
// bring it, and returns the message the Parser gathered and the range of
// its bytes.
func gatheredMessage(t *testing.T, pool *bufpool.Pool, m proto.Message) (Message, []byte) {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	p := Parser{Pool: pool}
	feed(&p, pool, frame(false, b), 16<<10, 16<<10, 16<<10, 16<<10, 16<<10)
	msg, ok, err := p.Next()
	if !ok || err != nil {
		t.Fatalf("Next: %v, %v", ok, err)
	}
	if msg.gathered == nil {
		t.Fatal("a message over several payloads was not gathered")
	}
	return msg, msg.Data[0].ReadOnlyData()
}

func within(field, buf []byte) bool {
	if len(field) == 0 || len(buf) == 0 {
		return false
	}
	f, lo := uintptr(unsafe.Pointer(unsafe.SliceData(field))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return f >= lo && f+uintptr(len(field)) <= lo+uintptr(len(buf))
}

// TestDecodeAliasesLargeFields: a gathered message's large bytes field
// points into the buffer it was gathered in, capacity cut to length; the
// same message decoded without alias does not.
func TestDecodeAliasesLargeFields(t *testing.T) {
	pool := bufpool.New(nil)
	in := &grpc_testing.SimpleRequest{
		Payload:      &grpc_testing.Payload{Body: bytes.Repeat([]byte("large"), 20000)},
		FillUsername: true,
		ResponseStatus: &grpc_testing.EchoStatus{
			Message: "small",
		},
	}
	for _, alias := range []bool{true, false} {
		msg, buf := gatheredMessage(t, pool, in)
		var out grpc_testing.SimpleRequest
		if err := DecodeMessage(protoCodec, msg, &out, alias); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(in, &out) {
			t.Fatalf("alias %v: decoded message differs", alias)
		}
		body := out.Payload.Body
		if within(body, buf) != alias {
			t.Errorf("alias %v: the large field points into the message's buffer: %v", alias, !alias)
		}
		if alias && cap(body) != len(body) {
			t.Errorf("alias %v: capacity %d for length %d", alias, cap(body), len(body))
		}
	}
	if n := pool.Outstanding(); n != 0 {
		t.Errorf("%d buffers outstanding", n)
	}
}

// vtMessage stands for a message vtprotobuf generated: its unsafe
// unmarshal keeps the input it is given.
type vtMessage struct {
	*grpc_testing.SimpleRequest
	input []byte
}

func (m *vtMessage) UnmarshalVTUnsafe(b []byte) error {
	m.input = b
	return proto.UnmarshalOptions{Merge: true}.Unmarshal(b, m.SimpleRequest)
}

// TestDecodeUnmarshalVTUnsafe: a message with vtprotobuf's unsafe
// unmarshal gets the gathered buffer itself, after a reset (grpc-go's
// codec resets; vtprotobuf's unmarshal merges).
func TestDecodeUnmarshalVTUnsafe(t *testing.T) {
	pool := bufpool.New(nil)
	in := &grpc_testing.SimpleRequest{Payload: &grpc_testing.Payload{Body: bytes.Repeat([]byte("vt"), 40000)}}
	msg, buf := gatheredMessage(t, pool, in)
	out := &vtMessage{SimpleRequest: &grpc_testing.SimpleRequest{ResponseSize: 5}}
	if err := DecodeMessage(protoCodec, msg, out, true); err != nil {
		t.Fatal(err)
	}
	if !within(out.input, buf) || len(out.input) != len(buf) {
		t.Error("UnmarshalVTUnsafe was not given the gathered buffer")
	}
	if !proto.Equal(in, out.SimpleRequest) {
		t.Error("decoded message differs: not reset before the unmarshal?")
	}
}

// TestDetachedBufferIsNotReused: the buffer an aliased message was gathered
// in is not handed out again by its pool.
func TestDetachedBufferIsNotReused(t *testing.T) {
	pool := bufpool.New(nil)
	in := &grpc_testing.SimpleRequest{Payload: &grpc_testing.Payload{Body: bytes.Repeat([]byte{7}, 100000)}}
	msg, _ := gatheredMessage(t, pool, in)
	var out grpc_testing.SimpleRequest
	if err := DecodeMessage(protoCodec, msg, &out, true); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		b := pool.Get(len(out.Payload.Body) + 64)
		if within(b.Bytes()[:1], out.Payload.Body) || within(out.Payload.Body[:1], b.Bytes()) {
			t.Fatal("the pool handed out the memory a decoded field points into")
		}
		for i := range b.Bytes() {
			b.Bytes()[i] = 0
		}
		defer b.Free()
	}
	if !bytes.Equal(out.Payload.Body, in.Payload.Body) {
		t.Error("the decoded field changed")
	}
}
