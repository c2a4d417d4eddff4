package leangrpc_test

import (
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// countingCodec is proto under another name, counting its calls.
type countingCodec struct {
	name             string
	marshal, unmarsh atomic.Int32
}

func (c *countingCodec) Name() string { return c.name }

func (c *countingCodec) Marshal(v any) (mem.BufferSlice, error) {
	c.marshal.Add(1)
	b, err := proto.Marshal(v.(proto.Message))
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (c *countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.unmarsh.Add(1)
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// v1Codec is an old-style encoding.Codec.
type v1Codec struct{ calls atomic.Int32 }

func (c *v1Codec) Name() string { return "leanv1" }
func (c *v1Codec) Marshal(v any) ([]byte, error) {
	c.calls.Add(1)
	return proto.Marshal(v.(proto.Message))
}
func (c *v1Codec) Unmarshal(b []byte, v any) error {
	c.calls.Add(1)
	return proto.Unmarshal(b, v.(proto.Message))
}

var subtypeCodec = &countingCodec{name: "leantest"}

func init() { encoding.RegisterCodecV2(subtypeCodec) }

func TestCodecs(t *testing.T) {
	forPairs(t, func(t *testing.T, p pair) {
		e := setup(t, p, serverSettings{}, clientSettings{})
		ctx := ctxT(t)
		req := &testpb.SimpleRequest{ResponseSize: 3000, Payload: payload(3000)}

		// A content-subtype picks the registered codec on both ends.
		before := subtypeCodec.marshal.Load() + subtypeCodec.unmarsh.Load()
		reply, err := e.tc.UnaryCall(ctx, req, grpc.CallContentSubtype("leantest"))
		if err != nil || len(reply.GetPayload().GetBody()) != 3000 {
			t.Fatalf("subtype call: %v", err)
		}
		if got := subtypeCodec.marshal.Load() + subtypeCodec.unmarsh.Load() - before; got != 4 {
			t.Errorf("subtype codec ran %d times, want 4 (both ends, both directions)", got)
		}

		// ForceCodecV2 on the client only: the subtype goes on the wire.
		forced := &countingCodec{name: "leantest"}
		if _, err := e.tc.UnaryCall(ctx, req, grpc.ForceCodecV2(forced)); err != nil {
			t.Fatalf("forced codec: %v", err)
		}
		if forced.marshal.Load() != 1 || forced.unmarsh.Load() != 1 {
			t.Errorf("forced codec ran %d/%d times", forced.marshal.Load(), forced.unmarsh.Load())
		}

		// An old-style codec through ForceCodec; the server falls back to
		// proto for the unknown subtype, as grpc-go's does.
		v1 := &v1Codec{}
		if _, err := e.tc.UnaryCall(ctx, req, grpc.ForceCodec(v1)); err != nil {
			t.Fatalf("v1 codec: %v", err)
		}
		if v1.calls.Load() != 2 {
			t.Errorf("v1 codec ran %d times", v1.calls.Load())
		}

		// A subtype nobody registered fails on the client.
		_, err = e.tc.UnaryCall(ctx, req, grpc.CallContentSubtype("nosuchcodec"))
		if err == nil {
			t.Error("unknown subtype: no error")
		}
	})
}
