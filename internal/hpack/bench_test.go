package hpack

import (
	"bytes"
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

var benchSets = []struct {
	name   string
	fields []HeaderField
}{
	{"grpc-request", append(append([]HeaderField(nil), grpcRequest...), hf("grpc-timeout", "99982u"))},
	{"grpc-response", []HeaderField{hf(":status", "200"), hf("content-type", "application/grpc")}},
	{"grpc-trailers", []HeaderField{hf("grpc-status", "0"), hf("grpc-message", "")}},
}

func BenchmarkHPACK(b *testing.B) {
	for _, set := range benchSets {
		// Steady state: the block a warmed encoder produces for the set.
		e := NewEncoder()
		var blk []byte
		for i := 0; i < 2; i++ {
			blk = e.BeginBlock(nil)
			for _, f := range set.fields {
				blk = e.AppendField(blk, f)
			}
		}
		warm := e.BeginBlock(nil)
		{
			e0 := NewEncoder()
			for _, f := range set.fields {
				warm = e0.AppendField(warm, f)
			}
		}

		b.Run("Decode/"+set.name+"/leangrpc", func(b *testing.B) {
			b.ReportAllocs()
			d := NewDecoder(4096)
			if err := d.Decode(warm, 0, func(HeaderField) {}); err != nil {
				b.Fatal(err)
			}
			n := 0
			emit := func(HeaderField) { n++ }
			for b.Loop() {
				if err := d.Decode(blk, 0, emit); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Decode/"+set.name+"/xnet", func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			d := xhpack.NewDecoder(4096, func(xhpack.HeaderField) { n++ })
			if _, err := d.Write(warm); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := d.Write(blk); err != nil {
					b.Fatal(err)
				}
				if err := d.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Encode/"+set.name+"/leangrpc", func(b *testing.B) {
			b.ReportAllocs()
			e := NewEncoder()
			buf := make([]byte, 0, 512)
			for b.Loop() {
				buf = e.BeginBlock(buf[:0])
				for _, f := range set.fields {
					buf = e.AppendField(buf, f)
				}
			}
		})
		b.Run("Encode/"+set.name+"/xnet", func(b *testing.B) {
			b.ReportAllocs()
			var buf bytes.Buffer
			e := xhpack.NewEncoder(&buf)
			xf := toX(set.fields)
			for b.Loop() {
				buf.Reset()
				for _, f := range xf {
					if err := e.WriteField(f); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
	// Worst case for the linear table scan: a full table of small entries
	// and fields that match none of them, name or value.
	full := make([]HeaderField, 120)
	for i := range full {
		full[i] = hf("x-k"+string(rune('a'+i%26))+string(rune('a'+i/26)), "v")
	}
	miss := []HeaderField{hf("x-miss", "1"), hf("x-other", "5S")}
	b.Run("Encode/full-table-miss/leangrpc", func(b *testing.B) {
		b.ReportAllocs()
		e := NewEncoder()
		for _, f := range full {
			e.AppendField(nil, f)
		}
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = buf[:0]
			for _, f := range miss {
				// Sensitive: scanned for a name, never added.
				f.Sensitive = true
				buf = e.AppendField(buf, f)
			}
		}
	})
	b.Run("Encode/full-table-miss/xnet", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		e := xhpack.NewEncoder(&buf)
		for _, f := range toX(full) {
			e.WriteField(f)
		}
		for b.Loop() {
			buf.Reset()
			for _, f := range miss {
				e.WriteField(xhpack.HeaderField{Name: f.Name, Value: f.Value, Sensitive: true})
			}
		}
	})
	b.Run("Decode/literals-new/leangrpc", func(b *testing.B) {
		b.ReportAllocs()
		// Fields never seen before, Huffman-coded, without indexing.
		blk := appendLiteral(nil, 0, 4, 0, hf("x-request-token", "c0ffee-1234-5678-abcdef"))
		blk = appendLiteral(blk, 0, 4, 4, hf(":path", "/some.Service/SomeMethodName"))
		d := NewDecoder(4096)
		for b.Loop() {
			if err := d.Decode(blk, 0, func(HeaderField) {}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decode/literals-new/xnet", func(b *testing.B) {
		b.ReportAllocs()
		blk := appendLiteral(nil, 0, 4, 0, hf("x-request-token", "c0ffee-1234-5678-abcdef"))
		blk = appendLiteral(blk, 0, 4, 4, hf(":path", "/some.Service/SomeMethodName"))
		d := xhpack.NewDecoder(4096, func(xhpack.HeaderField) {})
		for b.Loop() {
			if _, err := d.DecodeFull(blk); err != nil {
				b.Fatal(err)
			}
		}
	})
}
