package hpack

import (
	"fmt"
	"runtime"
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

// TestDecodedStringsAreInterned: literals of the gRPC vocabulary decode
// to the interned strings, with no allocation.
func TestDecodedStringsAreInterned(t *testing.T) {
	// Literal without indexing, literal name "content-type", value
	// "application/grpc": both come from the vocabulary.
	e := NewEncoder()
	blk := appendLiteral(nil, 0, 4, 0, hf("grpc-status", "0"))
	blk = appendLiteral(blk, 0, 4, 0, hf("te", "trailers"))
	_ = e
	d := NewDecoder(4096)
	n := testing.AllocsPerRun(100, func() {
		if err := d.Decode(blk, 0, func(HeaderField) {}); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations decoding vocabulary literals", n)
	}
}

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

// TestDecoderCanonicalStringsNotKept: a peer that makes the decoder
// index a new distinct field in every slot (each string goes through
// unique.Make) does not make the process keep the canonical copies of
// evicted entries: after the table turned over many times, the live heap
// does not grow with the number of distinct strings seen.
func TestDecoderCanonicalStringsNotKept(t *testing.T) {
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

// TestDecoderDistinctIndexedStringsCost: each distinct field a peer
// makes the decoder index should cost about what x/net's decoder pays (2.1
// allocations), not the ~15 of a joined string plus two unique.Make calls
// (clone, trie node, weak handle, cleanup each), which let a peer sending
// header blocks of new indexed fields slow the decoder down many times
// (PERFORMANCE.md, "Interning of decoded strings").
func TestDecoderDistinctIndexedStringsCost(t *testing.T) {
	const perBlock = 64
	seq := 0
	blocks := distinctBlocks(400, perBlock, &seq)
	emit := func(HeaderField) {}
	d := NewDecoder(4096)
	i := 0
	lean := testing.AllocsPerRun(199, func() {
		if err := d.Decode(blocks[i], 0, emit); err != nil {
			t.Fatal(err)
		}
		i++
	}) / perBlock
	x := xhpack.NewDecoder(4096, nil)
	xnet := testing.AllocsPerRun(199, func() {
		if _, err := x.DecodeFull(blocks[i]); err != nil {
			t.Fatal(err)
		}
		i++
	}) / perBlock
	t.Logf("allocations per distinct indexed field: lean %.1f, x/net %.1f", lean, xnet)
	if lean > 2*xnet+1 {
		t.Errorf("%.1f allocations per distinct indexed field, x/net's decoder %.1f", lean, xnet)
	}
}
