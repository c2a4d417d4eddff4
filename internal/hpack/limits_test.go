package hpack

import (
	"bytes"
	"strings"
	"testing"
)

// bombTable returns a decoder whose dynamic table holds one entry of about
// 4000 bytes (index 62), inserted by a literal with incremental indexing.
func bombTable(t *testing.T) *Decoder {
	t.Helper()
	d := NewDecoder(4096)
	block := appendLiteral(nil, 0x40, 6, 0, HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)})
	var got []HeaderField
	if err := d.Decode(block, 0, func(f HeaderField) { got = append(got, f) }); err != nil || len(got) != 1 || len(got[0].Value) != 4000 {
		t.Fatalf("inserting the entry: %v, %d fields", err, len(got))
	}
	return d
}

// TestDecodeBoundedByWireSize: a block referencing a 4000-byte entry
// 4000 times (16 MB of list, under a 16 MiB limit) stops emitting once the
// list passes the bound set by its wire size, reports ErrListTooLarge, and
// leaves the table in sync: the next block referencing the entry once
// decodes.
func TestDecodeBoundedByWireSize(t *testing.T) {
	d := bombTable(t)
	bomb := bytes.Repeat([]byte{0x80 | 62}, 4000)
	var size uint64
	n := 0
	err := d.Decode(bomb, 16<<20, func(f HeaderField) { size += uint64(f.Size()); n++ })
	if err != ErrListTooLarge {
		t.Fatalf("bomb: %v, want ErrListTooLarge", err)
	}
	if budget := d.listBudget(len(bomb)); size > budget {
		t.Errorf("bomb: emitted %d bytes of list in %d fields, bound %d", size, n, budget)
	}
	t.Logf("a %d-byte bomb emitted %d fields, %d bytes of list", len(bomb), n, size)
	var got []HeaderField
	if err := d.Decode([]byte{0x80 | 62, 0x82}, 16<<20, func(f HeaderField) { got = append(got, f) }); err != nil || len(got) != 2 || got[0].Name != "x-bomb" {
		t.Fatalf("the entry referenced once after the bomb: %v, %v", err, got)
	}
	// With no list limit at all, the bound still applies.
	if err := d.Decode(bomb, 0, func(HeaderField) {}); err != ErrListTooLarge {
		t.Errorf("bomb without a list limit: %v, want ErrListTooLarge", err)
	}
}

// TestDecodeBoundKeepsLegitimateBlocks: blocks an encoder sends decode
// under the bound: every static and dynamic entry referenced once, a large
// entry referenced once, literals with static names and empty values (the
// densest literal form), and a 1 MiB literal.
func TestDecodeBoundKeepsLegitimateBlocks(t *testing.T) {
	d := bombTable(t)
	var all []byte
	for i := 1; i <= staticLen+1; i++ {
		all = append(all, 0x80|byte(i))
	}
	dense := bytes.Repeat([]byte{0x0f, 0x05, 0x00}, 20000) // access-control-allow-origin: ""
	huge := appendLiteral(nil, 0x00, 4, 0, HeaderField{Name: "x", Value: strings.Repeat("v", 1<<20)})
	for name, block := range map[string][]byte{"every entry once": all, "dense literals": dense, "1 MiB literal": huge} {
		if err := d.Decode(block, 16<<20, func(HeaderField) {}); err != nil {
			t.Errorf("%s (%d bytes): %v", name, len(block), err)
		}
	}
	// The bound follows a larger table.
	big := NewDecoder(1 << 20)
	entry := appendLiteral(nil, 0x40, 6, 0, HeaderField{Name: "k", Value: strings.Repeat("v", 512<<10)})
	if err := big.Decode(entry, 0, func(HeaderField) {}); err != nil {
		t.Fatal(err)
	}
	if err := big.Decode([]byte{0x80 | 62}, 0, func(HeaderField) {}); err != nil {
		t.Errorf("a 512 KiB entry referenced once under a 1 MiB table: %v", err)
	}
}

// BenchmarkDecodeBomb decodes a 4000-byte block referencing a 4000-byte
// table entry 4000 times under a 16 MiB list limit: the cost of one HPACK
// bomb block to the decoder alone (the layers above check and copy what it
// emits).
func BenchmarkDecodeBomb(b *testing.B) {
	d := bombTable(&testing.T{})
	bomb := bytes.Repeat([]byte{0x80 | 62}, 4000)
	var size uint64
	emit := func(f HeaderField) { size += uint64(len(f.Value)) }
	b.SetBytes(int64(len(bomb)))
	for b.Loop() {
		d.Decode(bomb, 16<<20, emit)
	}
}
