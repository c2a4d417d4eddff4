package leangrpc_test

import (
	"bytes"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

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

// TestReviewCodecKeepsReference: messages a codec keeps a reference to stay
// intact after later messages arrive (small ones are views of the Parser's
// reused view field over a pooled buffer that is freed after Unmarshal,
// whatever the codec's Ref).
func TestReviewCodecKeepsReference(t *testing.T) {
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
