package leangrpc_test

import (
	"bytes"
	"sync"
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

// retainingCodec is the proto codec, except that Unmarshal keeps the data
// it was given by taking its own reference, as encoding.CodecV2 allows
// ("If the codec wishes to guarantee access to the data after this
// function, it must take its own reference"), with a copy of its bytes to
// compare later.
type retainingCodec struct {
	mu   sync.Mutex
	kept []mem.BufferSlice
	want [][]byte
}

func (c *retainingCodec) Name() string { return "proto" }

func (c *retainingCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (c *retainingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	data.Ref() // ours, freed in check
	// The slice's array is the caller's: the codec keeps its own copy
	// of the list (the buffers are what the reference guards).
	data = append(mem.BufferSlice(nil), data...)
	c.mu.Lock()
	c.kept = append(c.kept, data)
	c.want = append(c.want, data.Materialize())
	c.mu.Unlock()
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

// check compares every kept message with its bytes at Unmarshal time and
// drops the references.
func (c *retainingCodec) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, d := range c.kept {
		if got := d.Materialize(); !bytes.Equal(got, c.want[i]) {
			t.Errorf("message %d (%d bytes) kept with a reference changed after Unmarshal: now %d bytes %.16x", i, len(c.want[i]), len(got), got)
		}
		d.Free()
	}
	c.kept, c.want = nil, nil
}

// TestCodecKeepsReference: messages a codec keeps a reference to stay
// intact after later messages arrive (small ones are views of the Parser's
// reused view field over a pooled buffer that is freed after Unmarshal,
// whatever the codec's Ref).
func TestCodecKeepsReference(t *testing.T) {
	for _, p := range []pair{pairs[0], pairs[2]} {
		t.Run(p.name, func(t *testing.T) {
			e := setup(t, p, serverSettings{}, clientSettings{})
			c := &retainingCodec{}
			ctx := ctxT(t)
			// Streaming: several small responses on one stream.
			st, err := e.tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
				ResponseParameters: []*testpb.ResponseParameters{{Size: 100}, {Size: 200}, {Size: 300}, {Size: 50 << 10}, {Size: 150}},
			}, grpc.ForceCodecV2(c))
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := st.Recv(); err != nil {
					break
				}
			}
			// Unary calls: each response on a pooled ClientStream.
			for i := range 5 {
				if _, err := e.tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: int32(100 + i)}, grpc.ForceCodecV2(c)); err != nil {
					t.Fatal(err)
				}
			}
			c.check(t)
		})
	}
}
