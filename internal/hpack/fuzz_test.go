package hpack

import (
	"errors"
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

// fuzzSeedBlocks returns valid encodings of a few lists, by us and by x/net.
func fuzzSeedBlocks() [][]byte {
	var out [][]byte
	e := NewEncoder()
	lists := [][]HeaderField{grpcRequest, grpcRequest,
		{hf(":status", "200"), hf("content-type", "application/grpc")},
		{hf("grpc-status", "13"), hf("grpc-message", "boom"), {Name: "authorization", Value: "secret", Sensitive: true}},
	}
	for _, l := range lists {
		b := e.BeginBlock(nil)
		for _, f := range l {
			b = e.AppendField(b, f)
		}
		out = append(out, b)
	}
	e.SetPeerMaxTableSize(0)
	e.SetPeerMaxTableSize(256)
	out = append(out, e.AppendField(e.BeginBlock(nil), hf("x-a", "b")))
	return out
}

// FuzzDecode feeds two arbitrary blocks to one decoder. It must never panic
// nor emit past the limit; whatever it accepts, x/net's decoder must accept
// with the same fields, and our encoder must round-trip.
func FuzzDecode(f *testing.F) {
	seeds := fuzzSeedBlocks()
	for i, b := range seeds {
		f.Add(b, seeds[(i+1)%len(seeds)], uint32(0), uint16(0))
		f.Add(b, b, uint32(200), uint16(8))
	}
	f.Fuzz(func(t *testing.T, b1, b2 []byte, limit uint32, maxStr uint16) {
		d := NewDecoder(4096)
		d.SetMaxStringLength(int(maxStr))
		xd := xhpack.NewDecoder(4096, nil)
		for _, blk := range [][]byte{b1, b2} {
			var got []HeaderField
			var size uint64
			// The list limit in force: the caller's, or the bound set
			// by the block's wire size when that is lower.
			bound := d.listBudget(len(blk))
			if limit != 0 {
				bound = min(bound, uint64(limit))
			}
			err := d.Decode(blk, limit, func(f HeaderField) {
				got = append(got, f)
				size += uint64(f.Size())
				if size > bound {
					t.Fatalf("emitted %d bytes past the bound %d (limit %d)", size, bound, limit)
				}
			})
			if err != nil && err != ErrListTooLarge {
				var de *DecodingError
				if !errors.As(err, &de) {
					t.Fatalf("error %T %v is neither DecodingError nor ErrListTooLarge", err, err)
				}
				return
			}
			xlist, xerr := xd.DecodeFull(blk)
			if xerr != nil && leadingUpdates(blk) > 1 {
				// x/net refuses a second size update once its table
				// holds entries; RFC 7541 §4.2 allows two.
				return
			}
			if xerr != nil {
				t.Fatalf("we accept %x (err %v), x/net rejects: %v", blk, err, xerr)
			}
			want := fromX(xlist)
			if err == ErrListTooLarge {
				// We emitted the longest prefix within the limit.
				var total uint64
				n := 0
				for _, f := range want {
					if total+uint64(f.Size()) > bound {
						break
					}
					total += uint64(f.Size())
					n++
				}
				if n == len(want) || !fieldsEqual(got, want[:n]) {
					t.Fatalf("bound %d: got %+v, x/net %+v", bound, got, want)
				}
				continue
			}
			if !fieldsEqual(got, want) {
				t.Fatalf("got %+v, x/net %+v", got, want)
			}
			// Re-encode with a fresh encoder: decodes to the same list.
			e := NewEncoder()
			re := e.BeginBlock(nil)
			for _, f := range got {
				re = e.AppendField(re, f)
			}
			back, err := decodeAll(NewDecoder(4096), re, 0)
			if err != nil || !fieldsEqual(back, got) {
				t.Fatalf("re-encoded %x decodes to %+v, %v; want %+v", re, back, err, got)
			}
		}
	})
}

// fieldsFromBytes builds a header list from fuzz bytes: records of
// [flags][name len][name][value len][value], cut short where data ends.
func fieldsFromBytes(data []byte) []HeaderField {
	var out []HeaderField
	take := func() []byte {
		if len(data) == 0 {
			return nil
		}
		n := min(int(data[0]), len(data)-1)
		s := data[1 : 1+n]
		data = data[1+n:]
		return s
	}
	for len(data) > 0 && len(out) < 64 {
		flags := data[0]
		data = data[1:]
		var f HeaderField
		if flags&2 != 0 {
			f.Name = randNames[int(flags>>4)%len(randNames)]
		} else {
			f.Name = string(take())
		}
		if flags&4 != 0 {
			f.Value = randValues[int(flags>>4)%len(randValues)]
		} else {
			f.Value = string(take())
		}
		f.Sensitive = flags&1 != 0
		out = append(out, f)
	}
	return out
}

// FuzzRoundTrip encodes lists built from fuzz bytes, twice on one
// connection (so the second time uses the dynamic table) with an optional
// table size change, and decodes them with ours and x/net's decoders.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("\x00\x03abc\x03def\x06\x02\x05hello"), uint16(4096))
	f.Add([]byte("\x01\x0dauthorization\x06secret\x20\x40"), uint16(0))
	f.Add([]byte("\x02\x04/svc\x12\x00\x00\x34"), uint16(100))
	f.Fuzz(func(t *testing.T, data []byte, tableSize uint16) {
		list := fieldsFromBytes(data)
		e := NewEncoder()
		d := NewDecoder(4096)
		xd := xhpack.NewDecoder(4096, nil)
		for round := 0; round < 3; round++ {
			if round == 1 {
				e.SetPeerMaxTableSize(uint32(tableSize))
				d.SetAllowedMaxTableSize(uint32(tableSize))
				xd.SetAllowedMaxDynamicTableSize(uint32(tableSize))
			}
			b := e.BeginBlock(nil)
			for _, f := range list {
				b = e.AppendField(b, f)
			}
			got, err := decodeAll(d, b, 0)
			if err != nil || !fieldsEqual(got, list) {
				t.Fatalf("round %d: decoded %+v, %v; want %+v", round, got, err, list)
			}
			xgot, err := xd.DecodeFull(b)
			if err != nil || !fieldsEqual(fromX(xgot), list) {
				t.Fatalf("round %d: x/net decoded %+v, %v; want %+v", round, xgot, err, list)
			}
			if !fieldsEqual(tableEntries(&e.table), tableEntries(&d.table)) {
				t.Fatalf("round %d: encoder and decoder tables differ", round)
			}
		}
	})
}

// leadingUpdates counts the dynamic table size updates that start blk.
func leadingUpdates(blk []byte) int {
	n := 0
	for len(blk) > 0 && blk[0]&0xe0 == 0x20 {
		_, rest, err := readInt(blk, 5)
		if err != nil {
			break
		}
		blk = rest
		n++
	}
	return n
}
