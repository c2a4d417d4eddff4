package hpack

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestHuffmanKnownCodes(t *testing.T) {
	// Spot checks from RFC 7541 Appendix B.
	for _, c := range []struct {
		sym  int
		code uint32
		len  uint8
	}{
		{0, 0x1ff8, 13}, {'0', 0x0, 5}, {'a', 0x3, 5}, {' ', 0x14, 6},
		{'z', 0x7b, 7}, {255, 0x3ffffee, 26}, {eosSym, 0x3fffffff, 30},
	} {
		l := uint8(eosLen)
		if c.sym < 256 {
			l = huffLens[c.sym]
		}
		if huffCodes[c.sym] != c.code || l != c.len {
			t.Errorf("sym %d: code %#x/%d, want %#x/%d", c.sym, huffCodes[c.sym], l, c.code, c.len)
		}
	}
}

func TestHuffmanRoundTripAllBytes(t *testing.T) {
	var all []byte
	for i := 0; i < 256; i++ {
		all = append(all, byte(i))
	}
	for _, s := range []string{"", "a", "www.example.com", string(all), strings.Repeat("\xff\x00", 100)} {
		enc := AppendHuffman(nil, s)
		if len(enc) != HuffmanEncodeLength(s) {
			t.Fatalf("%q: length %d, HuffmanEncodeLength %d", s, len(enc), HuffmanEncodeLength(s))
		}
		dec, err := appendHuffmanDecode(nil, enc)
		if err != nil || string(dec) != s {
			t.Fatalf("%q: decoded %q, %v", s, dec, err)
		}
	}
}

// decErr is one malformed-input case; setup, if set, prepares the decoder.
type decErr struct {
	name  string
	hex   string
	setup func(*Decoder)
}

func TestDecodeErrors(t *testing.T) {
	cases := []decErr{
		{name: "indexed 0", hex: "80"},
		{name: "indexed beyond static, empty dynamic", hex: "be"},
		{name: "indexed far beyond", hex: "ff 80 01"},
		{name: "literal name index beyond tables", hex: "7f 00 01 61"},
		{name: "integer truncated", hex: "ff"},
		{name: "integer truncated in continuation", hex: "ff 80"},
		{name: "integer above 2^32-1", hex: "ff ff ff ff ff 0f"},
		{name: "integer too many continuation bytes", hex: "ff 80 80 80 80 80 00"},
		{name: "string length past block", hex: "40 05 61 62"},
		{name: "block ends after name", hex: "40 01 61"},
		{name: "block ends after name index", hex: "41"},
		{name: "block ends in string length", hex: "40 7f"},
		{name: "huffman EOS", hex: "00 84 ff ff ff ff 00"},
		{name: "huffman padding longer than 7 bits", hex: "00 82 1f ff 00"},
		{name: "huffman padding not all ones", hex: "00 81 18 00"},
		{name: "huffman value EOS", hex: "01 84 ff ff ff ff"},
		{name: "size update after field", hex: "82 3f e1 1f"},
		{name: "size update above allowed", hex: "3f e2 1f"},
		{name: "size update above lowered allowed", hex: "3f 46 82",
			setup: func(d *Decoder) { d.SetAllowedMaxTableSize(100) }},
		{name: "missing size update after lowering", hex: "82",
			setup: func(d *Decoder) { d.SetAllowedMaxTableSize(100) }},
		{name: "missing size update, empty block", hex: "",
			setup: func(d *Decoder) { d.SetAllowedMaxTableSize(0) }},
		{name: "raw string above max length", hex: "00 04 61 62 63 64 00",
			setup: func(d *Decoder) { d.SetMaxStringLength(3) }},
		{name: "raw value above max length", hex: "01 04 61 62 63 64",
			setup: func(d *Decoder) { d.SetMaxStringLength(3) }},
		{name: "huffman string above max length", hex: "00 83 18 c6 3f 00", // "aaaa"
			setup: func(d *Decoder) { d.SetMaxStringLength(3) }},
		{name: "huffman string far above max length", hex: "00 7f 90 01" + strings.Repeat(" 00", 200),
			setup: func(d *Decoder) { d.SetMaxStringLength(3) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoder(4096)
			if c.setup != nil {
				c.setup(d)
			}
			n := 0
			err := d.Decode(mustHex(t, c.hex), 0, func(HeaderField) { n++ })
			var de *DecodingError
			if !errors.As(err, &de) {
				t.Fatalf("got %v (%d fields), want *DecodingError", err, n)
			}
		})
	}
}

func TestHuffmanMaxStringOK(t *testing.T) {
	d := NewDecoder(4096)
	d.SetMaxStringLength(4)
	// "aaaa" Huffman-encoded name, empty value: exactly at the limit.
	got, err := decodeAll(d, mustHex(t, "00 83 18 c6 3f 00"), 0)
	if err != nil || len(got) != 1 || got[0].Name != "aaaa" {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestSizeUpdates(t *testing.T) {
	d := NewDecoder(4096)
	if _, err := decodeAll(d, mustHex(t, "40 01 61 01 62"), 0); err != nil {
		t.Fatal(err)
	}
	// Several updates in a row at the start: 0 evicts, then 4096 restores.
	got, err := decodeAll(d, mustHex(t, "20 3f e1 1f 82"), 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("got %+v, %v", got, err)
	}
	if size, max := d.TableSize(); size != 0 || max != 4096 {
		t.Fatalf("table size %d max %d, want 0 4096", size, max)
	}
	// Lowering the allowed size requires an update; one that complies is fine.
	d.SetAllowedMaxTableSize(100)
	if _, err := decodeAll(d, mustHex(t, "3f 45 82"), 0); err != nil { // update to 100
		t.Fatal(err)
	}
	if _, max := d.TableSize(); max != 100 {
		t.Fatalf("max %d, want 100", max)
	}
	if _, err := decodeAll(d, mustHex(t, "82"), 0); err != nil {
		t.Fatal(err)
	}
}

func TestEntryLargerThanTableEmptiesIt(t *testing.T) {
	d := NewDecoder(64)
	if _, err := decodeAll(d, mustHex(t, "40 01 61 01 62"), 0); err != nil { // 34 bytes
		t.Fatal(err)
	}
	big := "40 01 61 20" + strings.Repeat(" 62", 32) // 65 bytes > 64
	got, err := decodeAll(d, mustHex(t, big), 0)
	if err != nil || len(got) != 1 || len(got[0].Value) != 32 {
		t.Fatalf("got %+v, %v", got, err)
	}
	if size, _ := d.TableSize(); size != 0 || d.table.len() != 0 {
		t.Fatalf("table not emptied: size %d, %d entries", size, d.table.len())
	}
}

func TestListLimit(t *testing.T) {
	e := NewEncoder()
	fields := []HeaderField{
		hf(":method", "POST"),              // 32+7+4 = 43
		hf("x-a", strings.Repeat("a", 40)), // 32+3+40 = 75 -> 118
		hf("x-b", strings.Repeat("b", 40)), // -> 193
		hf("x-c", "c"),                     // -> 229
	}
	block := e.BeginBlock(nil)
	for _, f := range fields {
		block = e.AppendField(block, f)
	}
	d := NewDecoder(4096)
	got, err := decodeAll(d, block, 150)
	if err != ErrListTooLarge {
		t.Fatalf("err %v, want ErrListTooLarge", err)
	}
	if !fieldsEqual(got, fields[:2]) {
		t.Fatalf("emitted %+v, want the first two", got)
	}
	// The table stayed in sync: a second block referencing the entries
	// decodes to the same fields.
	block2 := e.BeginBlock(nil)
	for _, f := range fields {
		block2 = e.AppendField(block2, f)
	}
	if len(block2) != 4 {
		t.Fatalf("second block %x is not all indexed", block2)
	}
	got, err = decodeAll(d, block2, 0)
	if err != nil || !fieldsEqual(got, fields) {
		t.Fatalf("second block: %+v, %v", got, err)
	}
	// At exactly the limit nothing is dropped.
	got, err = decodeAll(d, block2, 229)
	if err != nil || len(got) != 4 {
		t.Fatalf("at the limit: %d fields, %v", len(got), err)
	}
}

func TestEncoderSizeUpdate(t *testing.T) {
	e := NewEncoder()
	if b := e.BeginBlock(nil); len(b) != 0 {
		t.Fatalf("update %x without a change", b)
	}
	e.SetPeerMaxTableSize(8192) // above our cap: no change
	if b := e.BeginBlock(nil); len(b) != 0 {
		t.Fatalf("update %x for a size above the cap", b)
	}
	blk := e.AppendField(e.BeginBlock(nil), hf("x-a", "1"))
	e.SetPeerMaxTableSize(0)
	e.SetPeerMaxTableSize(4096)
	b := e.BeginBlock(nil)
	if want := mustHex(t, "20 3f e1 1f"); !bytes.Equal(b, want) {
		t.Fatalf("got %x, want %x (minimum then final)", b, want)
	}
	if e.table.len() != 0 {
		t.Fatal("encoder kept entries through a zero-size table")
	}
	d := NewDecoder(4096)
	if _, err := decodeAll(d, blk, 0); err != nil {
		t.Fatal(err)
	}
	b = e.AppendField(b, hf("x-a", "1"))
	got, err := decodeAll(d, b, 0)
	if err != nil || !fieldsEqual(got, []HeaderField{hf("x-a", "1")}) {
		t.Fatalf("got %+v, %v", got, err)
	}
	e.SetPeerMaxTableSize(1000)
	if b := e.BeginBlock(nil); !bytes.Equal(b, mustHex(t, "3f c9 07")) {
		t.Fatalf("got %x, want a single update to 1000", b)
	}
}

func TestEncoderChoices(t *testing.T) {
	e := NewEncoder()
	// Exact static match: one byte.
	if b := e.AppendField(nil, hf(":method", "POST")); !bytes.Equal(b, []byte{0x83}) {
		t.Errorf(":method POST: %x", b)
	}
	// grpc-timeout is never added to the table.
	e.AppendField(nil, hf("grpc-timeout", "1S"))
	if e.table.len() != 0 {
		t.Error("grpc-timeout was indexed")
	}
	// Sensitive: never indexed even when an exact match exists.
	e.AppendField(nil, hf("authorization", "tok"))
	if b := e.AppendField(nil, HeaderField{Name: "authorization", Value: "tok", Sensitive: true}); b[0]&0xf0 != 0x10 {
		t.Errorf("sensitive field encoded as %x", b)
	}
	// A large value is sent without indexing.
	n := e.table.len()
	if b := e.AppendField(nil, hf("x-big", strings.Repeat("v", 1100))); b[0]&0xf0 != 0 {
		t.Errorf("large value encoded as %x...", b[:2])
	}
	if e.table.len() != n {
		t.Error("large value was indexed")
	}
	// :path values are indexed and then sent as one index.
	e.AppendField(nil, hf(":path", "/pkg.Svc/Method"))
	if b := e.AppendField(nil, hf(":path", "/pkg.Svc/Method")); len(b) != 1 || b[0]&0x80 == 0 {
		t.Errorf(":path second time: %x", b)
	}
}

func TestStaticBlock(t *testing.T) {
	blk := EncodeStaticBlock(hf(":status", "200"), hf("content-type", "application/grpc"), hf("grpc-status", "0"))
	e := NewEncoder()
	if got := e.AppendStatic(nil, hf(":status", "200")); !bytes.Equal(got, []byte{0x88}) {
		t.Fatalf("AppendStatic :status 200 = %x", got)
	}
	if e.table.len() != 0 {
		t.Fatal("AppendStatic touched the dynamic table")
	}
	// The block decodes the same on any decoder state, any number of times.
	d := NewDecoder(4096)
	if _, err := decodeAll(d, mustHex(t, "40 01 61 01 62"), 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		got, err := decodeAll(d, blk, 0)
		want := []HeaderField{hf(":status", "200"), hf("content-type", "application/grpc"), hf("grpc-status", "0")}
		if err != nil || !fieldsEqual(got, want) {
			t.Fatalf("got %+v, %v", got, err)
		}
	}
	if d.table.len() != 1 {
		t.Fatalf("static block changed the table: %d entries", d.table.len())
	}
}

// grpcRequest is a typical request header list of a unary call.
var grpcRequest = []HeaderField{
	hf(":method", "POST"),
	hf(":scheme", "http"),
	hf(":path", "/grpc.testing.BenchmarkService/UnaryCall"),
	hf(":authority", "localhost:50051"),
	hf("content-type", "application/grpc"),
	hf("user-agent", "grpc-go/1.85.0"),
	hf("te", "trailers"),
}

func TestDecodeNoAllocs(t *testing.T) {
	e := NewEncoder()
	d := NewDecoder(4096)
	enc := func(fields []HeaderField) []byte {
		b := e.BeginBlock(nil)
		for _, f := range fields {
			b = e.AppendField(b, f)
		}
		return b
	}
	custom := []HeaderField{hf("x-custom-1", "one"), hf("x-custom-2", "two two"), hf("x-trace", "abcdef")}
	for _, list := range [][]HeaderField{custom, grpcRequest} {
		if _, err := decodeAll(d, enc(list), 0); err != nil { // warm up
			t.Fatal(err)
		}
		blk := enc(list)
		for _, c := range blk {
			if c&0x80 == 0 {
				t.Fatalf("warmed block %x has a non-indexed field", blk)
			}
		}
		count := 0
		emit := func(HeaderField) { count++ }
		n := testing.AllocsPerRun(100, func() {
			if err := d.Decode(blk, 0, emit); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("%d fields: %v allocations per Decode", len(list), n)
		}
		if count == 0 {
			t.Error("nothing emitted")
		}
	}
}

func TestEncodeNoAllocs(t *testing.T) {
	e := NewEncoder()
	fields := append(append([]HeaderField(nil), grpcRequest...), hf("grpc-timeout", "99982u"))
	buf := make([]byte, 0, 512)
	for i := 0; i < 2; i++ {
		buf = e.BeginBlock(buf[:0])
		for _, f := range fields {
			buf = e.AppendField(buf, f)
		}
	}
	n := testing.AllocsPerRun(100, func() {
		buf = e.BeginBlock(buf[:0])
		for _, f := range fields {
			buf = e.AppendField(buf, f)
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per block", n)
	}
	if len(buf) == 0 {
		t.Fatal("empty block")
	}
}

func TestLargeStringScratchNotKept(t *testing.T) {
	val := strings.Repeat("abcdefgh", 2000)
	blk := appendLiteral(nil, 0, 4, 0, hf("x-big", val))
	d := NewDecoder(4096)
	got, err := decodeAll(d, blk, 0)
	if err != nil || len(got) != 1 || got[0].Value != val {
		t.Fatalf("decode: %v", err)
	}
	if cap(d.sc.huff) > maxKeptScratch || cap(d.sc.join) > maxKeptScratch {
		t.Fatalf("kept scratch %d / join %d bytes after a large header", cap(d.sc.huff), cap(d.sc.join))
	}
}

func TestStaticBlockSensitiveAndLiteral(t *testing.T) {
	in := []HeaderField{
		{Name: "authorization", Value: "Bearer x", Sensitive: true},
		{Name: ":status", Value: "200", Sensitive: true}, // never indexed, even static
		hf("grpc-status", "0"),
		hf(":status", "418"),
	}
	blk := EncodeStaticBlock(in...)
	if blk[0]&0xf0 != 0x10 {
		t.Fatalf("sensitive field encoded as %x", blk[0])
	}
	got, err := decodeAll(NewDecoder(4096), blk, 0)
	if err != nil || !fieldsEqual(got, in) {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestTableSearchHashed(t *testing.T) {
	e := NewEncoder()
	d := NewDecoder(4096)
	var fields []HeaderField
	for i := 0; i < 100; i++ {
		fields = append(fields, hf("x-n"+string(rune('a'+i%7)), "v"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	blk := e.BeginBlock(nil)
	for _, f := range fields {
		blk = e.AppendField(blk, f)
	}
	if e.table.len() <= linearMax {
		t.Fatalf("table has %d entries, want more than %d", e.table.len(), linearMax)
	}
	if _, err := decodeAll(d, blk, 0); err != nil {
		t.Fatal(err)
	}
	for i, f := range fields {
		idx, exact := e.table.search(f.Name, f.Value)
		if !exact || idx != len(fields)-i {
			t.Fatalf("%+v: index %d exact %v, want %d", f, idx, exact, len(fields)-i)
		}
	}
	// Name only: the newest entry with that name.
	if idx, exact := e.table.search("x-nb", "zz"); exact || e.table.at(idx) != fields[99] { // 99%7 == 1: "x-nb"
		t.Fatalf("name match: index %d exact %v", idx, exact)
	}
	if idx, _ := e.table.search("x-none", "v"); idx != 0 {
		t.Fatalf("miss returned %d", idx)
	}
	// Encoded second time: all indexed, and the peer agrees.
	blk = e.BeginBlock(nil)
	for _, f := range fields {
		blk = e.AppendField(blk, f)
	}
	// All indexed: indices 62..126 take one byte, 127..161 two.
	if len(blk) != 65+2*35 {
		t.Fatalf("second block is %d bytes, want 135", len(blk))
	}
	got, err := decodeAll(d, blk, 0)
	if err != nil || !fieldsEqual(got, fields) {
		t.Fatalf("decode: %v", err)
	}
}
