package protoalias_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leangrpc/leangrpc/internal/protoalias/testmsg"
)

// TestRecursionLimit checks nesting at protobuf-go's limit of 10,000
// levels. proto.Unmarshal decodes a top-level message (level 0) with
// nested messages down to level 9,999 and rejects one at level 10,000;
// protoalias must draw the line at the same level whether it descends
// into every level itself, into the upper levels only (handing the rest
// to proto with what is left of the limit), or into none.
func TestRecursionLimit(t *testing.T) {
	chunk := generatedType(&testmsg.Chunk{})
	data := filled(2048, 1)
	const handOver = 5000 // level from which the mixed case hands over to proto
	for _, levels := range []int{9998, 9999, 10000, 10001} {
		wire := chunkChain(levels, data)
		ok := levels <= 9999
		if err := proto.Unmarshal(wire, new(testmsg.Chunk)); (err == nil) != ok {
			t.Fatalf("%d levels: proto.Unmarshal error %v, want success %v", levels, err, ok)
		}
		// The Chunk at level k is about 4 bytes per level below it larger
		// than the innermost one.
		mixed := len(data) + 4*(levels-handOver)
		for _, minField := range []int{1024, mixed, len(wire) + 1} {
			d := checkDecode(t, chunk, minField, wire)
			if (d.err == nil) != ok {
				t.Errorf("%d levels, minField %d: error %v, want success %v", levels, minField, d.err, ok)
			}
			if ok && d.aliased != (minField <= len(data)) {
				t.Errorf("%d levels, minField %d: aliased %v", levels, minField, d.aliased)
			}
		}
	}
}
