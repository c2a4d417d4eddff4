package hpack

import (
	"fmt"
	"runtime"
	"testing"
)

// literalIndexed appends a literal field with incremental indexing and a
// new name (RFC 7541 §6.2.1), both strings raw (no Huffman).
func literalIndexed(b []byte, name, value string) []byte {
	b = append(b, 0x40)
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = append(b, byte(len(value)))
	return append(b, value...)
}

// distinctBlocks returns n header blocks of perBlock literal fields with
// incremental indexing, every name and value new, starting after *seq.
func distinctBlocks(n, perBlock int, seq *int) [][]byte {
	blocks := make([][]byte, n)
	for i := range blocks {
		var b []byte
		for range perBlock {
			*seq++
			b = literalIndexed(b, fmt.Sprintf("n%07d", *seq), fmt.Sprintf("v%029d", *seq))
		}
		blocks[i] = b
	}
	return blocks
}

// TestReviewDecoderCanonicalStringsNotKept: a peer that makes the decoder
// index a new distinct field in every slot (each string goes through
// unique.Make) does not make the process keep the canonical copies of
// evicted entries: after the table turned over many times, the live heap
// does not grow with the number of distinct strings seen.
func TestReviewDecoderCanonicalStringsNotKept(t *testing.T) {
	d := NewDecoder(4096)
	emit := func(HeaderField) {}
	seq := 0
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	for range 20 {
		for _, b := range distinctBlocks(100, 64, &seq) {
			if err := d.Decode(b, 0, emit); err != nil {
				t.Fatal(err)
			}
		}
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grown := int64(ms.HeapAlloc) - int64(before)
	t.Logf("live heap grew by %d KiB after %d distinct indexed fields", grown>>10, seq)
	if grown > 4<<20 {
		t.Errorf("live heap grew by %d KiB after the table turned over: evicted canonical strings are kept", grown>>10)
	}
}
