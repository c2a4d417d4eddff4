package hpack

import (
	"bytes"
	"math/rand/v2"
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

func toX(fs []HeaderField) []xhpack.HeaderField {
	out := make([]xhpack.HeaderField, len(fs))
	for i, f := range fs {
		out[i] = xhpack.HeaderField{Name: f.Name, Value: f.Value, Sensitive: f.Sensitive}
	}
	return out
}

func fromX(fs []xhpack.HeaderField) []HeaderField {
	out := make([]HeaderField, len(fs))
	for i, f := range fs {
		out[i] = HeaderField{Name: f.Name, Value: f.Value, Sensitive: f.Sensitive}
	}
	return out
}

func randString(r *rand.Rand, max int) string {
	b := make([]byte, r.IntN(max+1))
	for i := range b {
		if r.IntN(8) == 0 {
			b[i] = byte(r.IntN(256))
		} else {
			b[i] = "abcdefghijklmnopqrstuvwxyz0123456789-_/."[r.IntN(40)]
		}
	}
	return string(b)
}

var randNames = []string{":method", ":path", ":authority", ":status", "content-type",
	"grpc-status", "grpc-message", "grpc-timeout", "user-agent", "te", "x-user", "cookie",
	"authorization", "accept-encoding", "grpc-trace-bin"}

var randValues = []string{"POST", "GET", "200", "404", "application/grpc", "0", "13",
	"trailers", "gzip, deflate", "/", "/svc/Method", "", "grpc-go/1.85.0"}

// randList returns a random, non-empty header list mixing static, repeated
// and new fields.
func randList(r *rand.Rand) []HeaderField {
	n := 1 + r.IntN(12)
	out := make([]HeaderField, n)
	for i := range out {
		var f HeaderField
		if r.IntN(3) == 0 {
			f.Name = randString(r, 20)
		} else {
			f.Name = randNames[r.IntN(len(randNames))]
		}
		switch r.IntN(4) {
		case 0:
			f.Value = randString(r, 30)
		case 1:
			f.Value = randString(r, 1500)
		default:
			f.Value = randValues[r.IntN(len(randValues))]
		}
		f.Sensitive = r.IntN(10) == 0
		out[i] = f
	}
	return out
}

var tableSizes = []uint32{0, 1, 64, 100, 256, 1000, 4096, 8192}

func TestHuffmanAgainstXNet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		s := randString(r, 64)
		if i < 256 {
			s = string([]byte{byte(i)}) + s[:len(s)%3]
		}
		if got, want := HuffmanEncodeLength(s), xhpack.HuffmanEncodeLength(s); uint64(got) != want {
			t.Fatalf("%q: length %d, x/net %d", s, got, want)
		}
		ours := AppendHuffman(nil, s)
		theirs := xhpack.AppendHuffmanString(nil, s)
		if !bytes.Equal(ours, theirs) {
			t.Fatalf("%q: %x, x/net %x", s, ours, theirs)
		}
		if got, err := xhpack.HuffmanDecodeToString(ours); err != nil || got != s {
			t.Fatalf("%q: x/net decodes ours to %q, %v", s, got, err)
		}
		if got, err := appendHuffmanDecode(nil, theirs); err != nil || string(got) != s {
			t.Fatalf("%q: we decode x/net's to %q, %v", s, got, err)
		}
	}
	// Random bytes: both decoders accept and reject the same inputs.
	for i := 0; i < 20000; i++ {
		b := make([]byte, r.IntN(6))
		for j := range b {
			b[j] = byte(r.IntN(256))
			if r.IntN(2) == 0 {
				b[j] |= 0xf0
			}
		}
		got, err := appendHuffmanDecode(nil, b)
		want, xerr := xhpack.HuffmanDecodeToString(b)
		if (err == nil) != (xerr == nil) || (err == nil && string(got) != want) {
			t.Fatalf("%x: ours %q, %v; x/net %q, %v", b, got, err, want, xerr)
		}
	}
}

func TestOursToXNet(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for conn := 0; conn < 100; conn++ {
		e := NewEncoder()
		xd := xhpack.NewDecoder(4096, nil)
		for blk := 0; blk < 20; blk++ {
			if r.IntN(8) == 0 {
				n := tableSizes[r.IntN(len(tableSizes))]
				e.SetPeerMaxTableSize(n)
				xd.SetAllowedMaxDynamicTableSize(n)
			}
			list := randList(r)
			b := e.BeginBlock(nil)
			for _, f := range list {
				b = e.AppendField(b, f)
			}
			got, err := xd.DecodeFull(b)
			if err != nil {
				t.Fatalf("conn %d block %d: x/net: %v", conn, blk, err)
			}
			if !fieldsEqual(fromX(got), list) {
				t.Fatalf("conn %d block %d:\n got  %+v\n want %+v", conn, blk, got, list)
			}
		}
	}
}

func TestXNetToOurs(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for conn := 0; conn < 100; conn++ {
		var buf bytes.Buffer
		xe := xhpack.NewEncoder(&buf)
		d := NewDecoder(4096)
		for blk := 0; blk < 20; blk++ {
			if r.IntN(8) == 0 {
				n := tableSizes[r.IntN(len(tableSizes))]
				d.SetAllowedMaxTableSize(n)
				xe.SetMaxDynamicTableSizeLimit(n)
				xe.SetMaxDynamicTableSize(n)
			}
			list := randList(r)
			buf.Reset()
			for _, f := range toX(list) {
				if err := xe.WriteField(f); err != nil {
					t.Fatal(err)
				}
			}
			got, err := decodeAll(d, buf.Bytes(), 0)
			if err != nil {
				t.Fatalf("conn %d block %d: %v", conn, blk, err)
			}
			if !fieldsEqual(got, list) {
				t.Fatalf("conn %d block %d:\n got  %+v\n want %+v", conn, blk, got, list)
			}
		}
	}
}

// TestOursToOursLimits checks list limits against a reference computed
// from the list itself, on random lists and limits.
func TestOursToOursLimits(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	e := NewEncoder()
	d := NewDecoder(4096)
	for blk := 0; blk < 500; blk++ {
		list := randList(r)
		limit := uint32(r.IntN(2000))
		b := e.BeginBlock(nil)
		for _, f := range list {
			b = e.AppendField(b, f)
		}
		got, err := decodeAll(d, b, limit)
		var want []HeaderField
		var total uint32
		for _, f := range list {
			total += f.Size()
			if limit != 0 && total > limit {
				break
			}
			want = append(want, f)
		}
		tooLarge := limit != 0 && total > limit
		if (err == ErrListTooLarge) != tooLarge || (err != nil && err != ErrListTooLarge) {
			t.Fatalf("block %d limit %d: err %v, total %d", blk, limit, err, total)
		}
		if !fieldsEqual(got, want) {
			t.Fatalf("block %d limit %d:\n got  %+v\n want %+v", blk, limit, got, want)
		}
	}
}
