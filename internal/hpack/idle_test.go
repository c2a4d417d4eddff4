package hpack

import (
	"fmt"
	"hash/maphash"
	"testing"
	"unsafe"
)

// TestIdleSizes pins what every connection holds for HPACK while idle: a
// decoder and an encoder of the 64-byte size class, and 32 bytes per ring
// slot.
func TestIdleSizes(t *testing.T) {
	if d, e, s := unsafe.Sizeof(Decoder{}), unsafe.Sizeof(Encoder{}), unsafe.Sizeof(entry{}); d > 64 || e > 64 || s > 32 {
		t.Errorf("Decoder %d, Encoder %d, table slot %d bytes; want at most 64, 64, 32", d, e, s)
	}
}

// TestTableGrowsWithUse checks that a table holding the few fields a gRPC
// peer indexes keeps a ring of that size, not one sized for a full 4096-byte
// table, and that the encoder's name hashes appear only on a long ring.
func TestTableGrowsWithUse(t *testing.T) {
	e := NewEncoder()
	d := NewDecoder(4096)
	fields := append(append([]HeaderField(nil), grpcRequest...), hf("grpc-timeout", "99982u"))
	blk := e.BeginBlock(nil)
	for _, f := range fields {
		blk = e.AppendField(blk, f)
	}
	got, err := decodeAll(d, blk, 0)
	if err != nil || !fieldsEqual(got, fields) {
		t.Fatalf("decode: %v", err)
	}
	if e.table.len() == 0 || e.table.len() != d.table.len() {
		t.Fatalf("tables hold %d and %d entries", e.table.len(), d.table.len())
	}
	for _, tb := range []*dynTable{&e.table, &d.table} {
		// At most half again the entries (one growth step past them).
		if len(tb.ring) > max(minRing, tb.len()+(tb.len()+1)/2) || tb.nameHash != nil {
			t.Errorf("%d entries: ring of %d, name hashes %v; want at most half again and none", tb.len(), len(tb.ring), tb.nameHash != nil)
		}
	}
}

// TestReleaseScratch checks that a released decoder holds no scratch space,
// decodes the same afterwards, and in steady state takes its scratch back
// from the pool without allocating.
func TestReleaseScratch(t *testing.T) {
	e := NewEncoder()
	d := NewDecoder(4096)
	// Huffman-coded literals that are not indexed: every Decode uses the
	// scratch space.
	fields := []HeaderField{
		{Name: "x-secret", Value: "a fairly long value to huffman code", Sensitive: true},
		{Name: "grpc-status", Value: "0", Sensitive: true},
	}
	blk := e.BeginBlock(nil)
	for _, f := range fields {
		blk = e.AppendField(blk, f)
	}
	for range 3 {
		got, err := decodeAll(d, blk, 0)
		if err != nil || !fieldsEqual(got, fields) {
			t.Fatalf("decode: %+v, %v", got, err)
		}
		if d.sc == nil || cap(d.sc.huff) == 0 {
			t.Fatalf("after Decode: scratch %v", d.sc != nil)
		}
		d.ReleaseScratch()
		if d.sc != nil {
			t.Fatal("after ReleaseScratch the decoder still holds scratch space")
		}
		d.ReleaseScratch() // twice is harmless
	}
	if raceEnabled {
		return
	}
	emit := func(HeaderField) {}
	n := testing.AllocsPerRun(100, func() {
		if err := d.Decode(blk, 0, emit); err != nil {
			t.Fatal(err)
		}
		d.ReleaseScratch()
	})
	// The "x-secret" literal's strings are one allocation; the scratch none.
	if n != 1 {
		t.Errorf("%v allocations per Decode+ReleaseScratch, want 1 (the literal's strings)", n)
	}
}

// TestTableStringsShared checks that the dynamic tables of two decoders
// fed the same indexed literals hold the same string memory, so that idle
// connections from one client pin one copy between them.
func TestTableStringsShared(t *testing.T) {
	// The strings must fall in distinct slots of the direct-mapped cache,
	// or the second would evict the first between the two decoders (the
	// seed is random per process: about one run in 170 failed so).
	slot := func(s string) uint64 { return maphash.String(sharedSeed, s) % sharedSlots }
	// Both values vary until all three slots differ: varying only the id
	// never ends when the authority's slot is the name's.
	authority, id := "svc.example:8443", "a-value-only-this-test-uses"
	for i := 0; slot(authority) == slot(id) || slot(authority) == slot("x-client-id") || slot(id) == slot("x-client-id"); i++ {
		authority = fmt.Sprintf("svc%d.example:8443", i)
		id = fmt.Sprintf("a-value-only-this-test-uses-%d", i)
	}
	fields := []HeaderField{hf(":authority", authority), hf("x-client-id", id)}
	var tables [2]*Decoder
	for i := range tables {
		e := NewEncoder()
		blk := e.BeginBlock(nil)
		for _, f := range fields {
			blk = e.AppendField(blk, f)
		}
		d := NewDecoder(4096)
		got, err := decodeAll(d, blk, 0)
		if err != nil || !fieldsEqual(got, fields) {
			t.Fatalf("decode: %v, %v", got, err)
		}
		if d.table.len() != len(fields) {
			t.Fatalf("table holds %d entries, want %d", d.table.len(), len(fields))
		}
		tables[i] = d
	}
	for k := 1; k <= len(fields); k++ {
		a, b := tables[0].table.at(k), tables[1].table.at(k)
		if a != b || unsafe.StringData(a.Value) != unsafe.StringData(b.Value) || unsafe.StringData(a.Name) != unsafe.StringData(b.Name) {
			t.Errorf("entry %d: %v and %v do not share their strings", k, a, b)
		}
	}
}

// TestFitTable checks that fitting both tables to their entries (as a
// connection going idle does) keeps them in step: blocks encoded before
// and after, with tables short and long enough for name hashes, decode to
// what was encoded, and a fitted ring holds no spare slot.
func TestFitTable(t *testing.T) {
	e := NewEncoder()
	d := NewDecoder(4096)
	for round := range 6 {
		var fields []HeaderField
		for i := range 3 + 4*round {
			fields = append(fields, hf(fmt.Sprintf("x-field-%d", i%(2+round)), fmt.Sprintf("value-%d-%d", round, i)))
		}
		fields = append(fields, grpcRequest...)
		blk := e.BeginBlock(nil)
		for _, f := range fields {
			blk = e.AppendField(blk, f)
		}
		got, err := decodeAll(d, blk, 0)
		if err != nil || !fieldsEqual(got, fields) {
			t.Fatalf("round %d: decode: %v", round, err)
		}
		e.FitTable()
		d.FitTable()
		for _, tb := range []*dynTable{&e.table, &d.table} {
			if len(tb.ring) != tb.len() {
				t.Fatalf("round %d: fitted ring of %d slots for %d entries", round, len(tb.ring), tb.len())
			}
			if tb.nameHash != nil && len(*tb.nameHash) != len(tb.ring) {
				t.Fatalf("round %d: %d name hashes for a ring of %d", round, len(*tb.nameHash), len(tb.ring))
			}
		}
		// The same fields again come from the tables.
		blk = e.BeginBlock(nil)
		for _, f := range fields {
			blk = e.AppendField(blk, f)
		}
		got, err = decodeAll(d, blk, 0)
		if err != nil || !fieldsEqual(got, fields) {
			t.Fatalf("round %d: decode after fitting: %v", round, err)
		}
	}
}
