package hpack

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// mustHex decodes an RFC-style hex dump (spaces and newlines ignored).
func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeAll decodes one block and returns the emitted fields.
func decodeAll(d *Decoder, block []byte, limit uint32) ([]HeaderField, error) {
	var got []HeaderField
	err := d.Decode(block, limit, func(f HeaderField) { got = append(got, f) })
	return got, err
}

// tableEntries lists a dynamic table from index 1 (newest) on.
func tableEntries(t *dynTable) []HeaderField {
	var out []HeaderField
	for i := 1; i <= t.len(); i++ {
		out = append(out, t.at(i))
	}
	return out
}

func fieldsEqual(a, b []HeaderField) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type cBlock struct {
	hex       string
	fields    []HeaderField
	table     []HeaderField // after the block, newest first
	tableSize uint32
}

type cCase struct {
	name       string
	tableMax   uint32
	blocks     []cBlock
	encodeSame bool // our encoder produces these exact bytes
}

func hf(n, v string) HeaderField { return HeaderField{Name: n, Value: v} }

var (
	reqBlock1 = []HeaderField{hf(":method", "GET"), hf(":scheme", "http"), hf(":path", "/"), hf(":authority", "www.example.com")}
	reqBlock2 = []HeaderField{hf(":method", "GET"), hf(":scheme", "http"), hf(":path", "/"), hf(":authority", "www.example.com"), hf("cache-control", "no-cache")}
	reqBlock3 = []HeaderField{hf(":method", "GET"), hf(":scheme", "https"), hf(":path", "/index.html"), hf(":authority", "www.example.com"), hf("custom-key", "custom-value")}
	reqTable1 = []HeaderField{hf(":authority", "www.example.com")}
	reqTable2 = []HeaderField{hf("cache-control", "no-cache"), hf(":authority", "www.example.com")}
	reqTable3 = []HeaderField{hf("custom-key", "custom-value"), hf("cache-control", "no-cache"), hf(":authority", "www.example.com")}

	date1  = "Mon, 21 Oct 2013 20:13:21 GMT"
	date2  = "Mon, 21 Oct 2013 20:13:22 GMT"
	loc    = "https://www.example.com"
	cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"

	respBlock1 = []HeaderField{hf(":status", "302"), hf("cache-control", "private"), hf("date", date1), hf("location", loc)}
	respBlock2 = []HeaderField{hf(":status", "307"), hf("cache-control", "private"), hf("date", date1), hf("location", loc)}
	respBlock3 = []HeaderField{hf(":status", "200"), hf("cache-control", "private"), hf("date", date2), hf("location", loc), hf("content-encoding", "gzip"), hf("set-cookie", cookie)}
	respTable1 = []HeaderField{hf("location", loc), hf("date", date1), hf("cache-control", "private"), hf(":status", "302")}
	respTable2 = []HeaderField{hf(":status", "307"), hf("location", loc), hf("date", date1), hf("cache-control", "private")}
	respTable3 = []HeaderField{hf("set-cookie", cookie), hf("content-encoding", "gzip"), hf("date", date2)}
)

var appendixC = []cCase{
	{name: "C.2.1", tableMax: 4096, blocks: []cBlock{{
		hex:    "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
		fields: []HeaderField{hf("custom-key", "custom-header")},
		table:  []HeaderField{hf("custom-key", "custom-header")}, tableSize: 55,
	}}},
	{name: "C.2.2", tableMax: 4096, blocks: []cBlock{{
		hex:    "040c 2f73 616d 706c 652f 7061 7468",
		fields: []HeaderField{hf(":path", "/sample/path")},
	}}},
	{name: "C.2.3", tableMax: 4096, blocks: []cBlock{{
		hex:    "1008 7061 7373 776f 7264 0673 6563 7265 74",
		fields: []HeaderField{{Name: "password", Value: "secret", Sensitive: true}},
	}}},
	{name: "C.2.4", tableMax: 4096, encodeSame: true, blocks: []cBlock{{
		hex:    "82",
		fields: []HeaderField{hf(":method", "GET")},
	}}},
	{name: "C.3", tableMax: 4096, blocks: []cBlock{
		{hex: "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", fields: reqBlock1, table: reqTable1, tableSize: 57},
		{hex: "8286 84be 5808 6e6f 2d63 6163 6865", fields: reqBlock2, table: reqTable2, tableSize: 110},
		{hex: "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65", fields: reqBlock3, table: reqTable3, tableSize: 164},
	}},
	{name: "C.4", tableMax: 4096, encodeSame: true, blocks: []cBlock{
		{hex: "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", fields: reqBlock1, table: reqTable1, tableSize: 57},
		{hex: "8286 84be 5886 a8eb 1064 9cbf", fields: reqBlock2, table: reqTable2, tableSize: 110},
		{hex: "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf", fields: reqBlock3, table: reqTable3, tableSize: 164},
	}},
	{name: "C.5", tableMax: 256, blocks: []cBlock{
		{hex: `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32
			3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d`,
			fields: respBlock1, table: respTable1, tableSize: 222},
		{hex: "4803 3330 37c1 c0bf", fields: respBlock2, table: respTable2, tableSize: 222},
		{hex: `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970
			7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61
			6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31`,
			fields: respBlock3, table: respTable3, tableSize: 215},
	}},
	{name: "C.6", tableMax: 256, blocks: []cBlock{
		{hex: `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad
			1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
			fields: respBlock1, table: respTable1, tableSize: 222},
		{hex: "4883 640e ffc1 c0bf", fields: respBlock2, table: respTable2, tableSize: 222},
		{hex: `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2
			e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
			fields: respBlock3, table: respTable3, tableSize: 215},
	}},
}

func TestAppendixCDecode(t *testing.T) {
	for _, c := range appendixC {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoder(c.tableMax)
			for i, b := range c.blocks {
				got, err := decodeAll(d, mustHex(t, b.hex), 0)
				if err != nil {
					t.Fatalf("block %d: %v", i, err)
				}
				if !fieldsEqual(got, b.fields) {
					t.Fatalf("block %d fields:\n got  %+v\n want %+v", i, got, b.fields)
				}
				if tab := tableEntries(&d.table); !fieldsEqual(tab, b.table) {
					t.Fatalf("block %d table:\n got  %+v\n want %+v", i, tab, b.table)
				}
				if size, _ := d.TableSize(); size != b.tableSize {
					t.Fatalf("block %d table size %d, want %d", i, size, b.tableSize)
				}
			}
		})
	}
}

// TestAppendixCEncode checks the examples whose choices match ours byte for
// byte, and for all of them that our encoding decodes back and leaves the
// encoder's table equal to the decoder's.
func TestAppendixCEncode(t *testing.T) {
	for _, c := range appendixC {
		t.Run(c.name, func(t *testing.T) {
			e := NewEncoder()
			e.SetPeerMaxTableSize(c.tableMax)
			d := NewDecoder(c.tableMax)
			for i, b := range c.blocks {
				var out []byte
				if i > 0 || c.tableMax == defaultTableSize {
					out = e.BeginBlock(nil)
				} else {
					out = e.BeginBlock(nil)
					if len(out) == 0 {
						t.Fatal("no size update after SetPeerMaxTableSize")
					}
				}
				for _, f := range b.fields {
					out = e.AppendField(out, f)
				}
				if c.encodeSame && !bytes.Equal(out, mustHex(t, b.hex)) {
					t.Errorf("block %d: got %x, want %x", i, out, mustHex(t, b.hex))
				}
				got, err := decodeAll(d, out, 0)
				if err != nil || !fieldsEqual(got, b.fields) {
					t.Fatalf("block %d: decode %+v, %v", i, got, err)
				}
				if !fieldsEqual(tableEntries(&e.table), tableEntries(&d.table)) {
					t.Fatalf("block %d: encoder table %+v != decoder table %+v", i, tableEntries(&e.table), tableEntries(&d.table))
				}
			}
		})
	}
}
