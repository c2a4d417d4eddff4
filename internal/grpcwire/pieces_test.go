package grpcwire

import (
	"bytes"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// joined returns the bytes of p's pieces in order, and how many of them
// wrap the message's memory; it gives p back.
func joined(t *testing.T, p *pieces) ([]byte, int) {
	t.Helper()
	var out []byte
	wrapped := 0
	for _, b := range p.bufs {
		out = append(out, b.Bytes()...)
		if p.isWrapped(b) {
			wrapped++
		}
	}
	p.drop()
	return out, wrapped
}

// isWrapped says whether b is one of p's pieces that wrap the message.
func (p *pieces) isWrapped(b *bufpool.Buffer) bool {
	for _, s := range p.segs {
		if len(s.ref) > 0 && b.Len() > 0 && &s.ref[0] == &b.Bytes()[0] {
			return true
		}
	}
	return false
}

// framed is what EncodeBuffer sends for m: the prefix and proto.Marshal.
func framed(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := EncodeBuffer(bufpool.Default(), protoCodec, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	return bytes.Clone(b.Bytes())
}

func TestPiecesReferenceLargeBytes(t *testing.T) {
	body := bytes.Repeat([]byte{7}, 300<<10)
	status := &grpc_testing.EchoStatus{Code: 3, Message: "after the payload"}
	cases := []struct {
		name    string
		m       proto.Message
		wrapped int
	}{
		{"top level", &grpc_testing.Payload{Type: grpc_testing.PayloadType_COMPRESSABLE, Body: body}, 1},
		{"nested, last", &grpc_testing.SimpleResponse{Payload: &grpc_testing.Payload{Body: body}, Username: "u"}, 1},
		{"nested, fields after", &grpc_testing.StreamingOutputCallRequest{
			ResponseParameters: []*grpc_testing.ResponseParameters{{Size: 10}, {Size: 20}},
			Payload:            &grpc_testing.Payload{Body: body},
			ResponseStatus:     status,
		}, 1},
		{"two", &grpc_testing.SimpleRequest{
			Payload:        &grpc_testing.Payload{Body: body},
			ResponseStatus: &grpc_testing.EchoStatus{Message: string(body)},
		}, 1},
		{"any", &anypb.Any{TypeUrl: "x/y", Value: body}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			size := proto.Size(c.m)
			p := marshalPieces(bufpool.Default(), c.m, size, referenceMin, firstPieceData)
			if p == nil {
				t.Fatal("no pieces")
			}
			if p.size != size {
				t.Fatalf("size %d, want %d", p.size, size)
			}
			got, wrapped := joined(t, p)
			if want := framed(t, c.m); !bytes.Equal(got, want) {
				t.Fatalf("pieces differ from EncodeBuffer's bytes: %d against %d bytes", len(got), len(want))
			}
			if wrapped != c.wrapped {
				t.Fatalf("%d pieces wrap the message, want %d", wrapped, c.wrapped)
			}
		})
	}
}

func TestPiecesNotWorthIt(t *testing.T) {
	small := &grpc_testing.SimpleResponse{Payload: &grpc_testing.Payload{Body: make([]byte, referenceMin-1)}}
	if p := marshalPieces(bufpool.Default(), small, proto.Size(small), referenceMin, firstPieceData); p != nil {
		p.drop()
		t.Fatal("pieces for a message with no field of referenceMin bytes")
	}
	// A stale size (the message changed after it was measured) falls back.
	m := &grpc_testing.Payload{Body: make([]byte, 300<<10)}
	if p := marshalPieces(bufpool.Default(), m, proto.Size(m)-1, referenceMin, firstPieceData); p != nil {
		p.drop()
		t.Fatal("pieces for a message whose size is stale")
	}
}

// TestPiecesReleased checks that drop waits for a wrapped piece's last
// owner: the writer's reference, dropped after its flush.
func TestPiecesReleased(t *testing.T) {
	m := &grpc_testing.Payload{Body: make([]byte, 300<<10)}
	p := marshalPieces(bufpool.Default(), m, proto.Size(m), referenceMin, firstPieceData)
	if p == nil || p.refs != 1 {
		t.Fatal("no wrapped piece")
	}
	var wrapped *bufpool.Buffer
	for _, b := range p.bufs {
		if p.isWrapped(b) {
			wrapped = b
		}
	}
	wrapped.Ref() // the writer's reference, until its flush
	done := make(chan struct{})
	go func() { p.drop(); close(done) }()
	select {
	case <-done:
		t.Fatal("drop returned while a wrapped piece was still referenced")
	case <-time.After(50 * time.Millisecond):
	}
	wrapped.Free()
	<-done
}

// FuzzPieces checks that a message in pieces is, byte for byte, what
// proto.Marshal makes of it, whatever its fields (unknown ones included)
// and wherever its bytes fields lie.
func FuzzPieces(f *testing.F) {
	seed := func(m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		for k := byte(0); k < 6; k++ {
			f.Add(k, uint8(4), b)
		}
	}
	seed(&grpc_testing.StreamingOutputCallRequest{
		ResponseParameters: []*grpc_testing.ResponseParameters{{Size: 10}},
		Payload:            &grpc_testing.Payload{Body: []byte("0123456789abcdef")},
		ResponseStatus:     &grpc_testing.EchoStatus{Code: 1, Message: "m"},
	})
	seed(&anypb.Any{TypeUrl: "t", Value: []byte("0123456789")})
	f.Fuzz(func(t *testing.T, kind, min uint8, data []byte) {
		var m proto.Message
		switch kind % 6 {
		case 0:
			m = &grpc_testing.Payload{}
		case 1:
			m = &grpc_testing.SimpleResponse{}
		case 2:
			m = &grpc_testing.StreamingOutputCallRequest{}
		case 3:
			m = &anypb.Any{}
		case 4:
			m = &grpc_testing.SimpleRequest{} // maps: compared by value
		default:
			m = &wrapperspb.BytesValue{}
		}
		if proto.Unmarshal(data, m) != nil {
			return
		}
		size := proto.Size(m)
		p := marshalPieces(bufpool.Default(), m, size, 1+int(min%32), int(min/32))
		if p == nil {
			return
		}
		got, _ := joined(t, p)
		if _, maps := m.(*grpc_testing.SimpleRequest); maps {
			// proto.Marshal writes map entries in no set order.
			back := m.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(got[PrefixLen:], back); err != nil || !proto.Equal(back, m) {
				t.Fatalf("pieces do not decode to the message (%v):\n got %x", err, got)
			}
			return
		}
		if want := framed(t, m); !bytes.Equal(got, want) {
			t.Fatalf("pieces differ from proto.Marshal:\n got %x\nwant %x", got, want)
		}
	})
}

// TestPiecesAllocations checks that a large message in pieces allocates
// nothing in steady state: the scratch, the buffers, the runs of small
// fields and the wait are pooled. (A repeated field among the small ones
// costs one: protoreflect's view of the list.)
func TestPiecesAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	m := &grpc_testing.SimpleResponse{
		Payload:  &grpc_testing.Payload{Type: grpc_testing.PayloadType_COMPRESSABLE, Body: make([]byte, 300<<10)},
		Username: "u",
		ServerId: "s",
	}
	size := proto.Size(m)
	allocs := testing.AllocsPerRun(50, func() {
		marshalPieces(bufpool.Default(), m, size, referenceMin, firstPieceData).drop()
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per message in pieces, want 0", allocs)
	}
}
