package h2frame

import (
	"bytes"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// TestWriterSmallBatches checks the write buffer tiers: batches that stay in
// the inline buffer, move to a small buffer, and move on to pooled buffers
// all reach the sink in one contiguous write with the same bytes as frames
// encoded one by one, and no Writer keeps a small or pooled buffer after the
// Flush.
func TestWriterSmallBatches(t *testing.T) {
	for _, sizes := range [][]int{
		{0},                   // a SETTINGS ack alone
		{100},                 // inline
		{tinyWriteBufferSize}, // first write too large for the inline buffer
		{50, 50, 50},          // inline, then moved to a small buffer
		{100, 800},            // moved to a small buffer, filled to the brim
		{100, 500, 500},       // inline, small, then a pooled buffer
		{900, 900, 900},
		{smallWriteBufferSize},
	} {
		pool := bufpool.New(nil)
		sink := &vecSink{}
		w := NewWriter(sink, WriterConfig{Pool: pool})
		var want bytes.Buffer
		for i, n := range sizes {
			p := bytes.Repeat([]byte{byte('a' + i)}, n)
			if n == 0 {
				w.WriteSettingsAck()
				want.Write(frameBytes(TypeSettings, FlagAck, 0, nil))
				continue
			}
			w.WriteData(1, false, p)
			want.Write(frameBytes(TypeData, 0, 1, p))
		}
		if w.Buffered() != want.Len() {
			t.Errorf("%v: Buffered = %d, want %d", sizes, w.Buffered(), want.Len())
		}
		if err := w.Flush(); err != nil {
			t.Fatalf("%v: Flush = %v", sizes, err)
		}
		if !bytes.Equal(sink.Bytes(), want.Bytes()) {
			t.Errorf("%v: wrote %d bytes, not the %d expected", sizes, sink.Len(), want.Len())
		}
		if total := want.Len(); total <= smallWriteBufferSize && sink.writes+sink.vecs != 1 {
			t.Errorf("%v: %d writes and %d writevs for %d bytes, want one write", sizes, sink.writes, sink.vecs, total)
		}
		if w.small != nil || w.cur != nil || pool.Outstanding() != 0 {
			t.Errorf("%v: after Flush: small %v, pooled %v, outstanding %d", sizes, w.small != nil, w.cur != nil, pool.Outstanding())
		}
		w.WritePing(false, [8]byte{1})
		w.Close()
		if w.small != nil || w.Buffered() != 0 {
			t.Errorf("%v: after Close: small %v, buffered %d", sizes, w.small != nil, w.Buffered())
		}
	}
}

// TestWriterSmallBatchAllocs checks that small batches cost no allocation in
// steady state, the small buffer coming back from its sync.Pool.
func TestWriterSmallBatchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	w := NewWriter(&discardVec{}, WriterConfig{})
	defer w.Close()
	p := make([]byte, 300)
	run := func() {
		w.WriteData(1, false, p[:100])
		w.WriteData(1, false, p)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Errorf("small batch: %v allocs per Flush, want 0", n)
	}
}
