package main

import (
	"bytes"
	"strings"
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

// The attacks' hand-made header blocks decode, through x/net's decoder, to
// what they claim: a valid request, and a bomb whose references expand to
// the indexed value.
func TestAttackHeaderBlocks(t *testing.T) {
	var got []xhpack.HeaderField
	dec := xhpack.NewDecoder(4096, func(f xhpack.HeaderField) { got = append(got, f) })
	if _, err := dec.Write(requestBlock(unaryMethod)); err != nil {
		t.Fatalf("request block: %v", err)
	}
	want := map[string]string{":method": "POST", ":path": unaryMethod, "content-type": "application/grpc", "te": "trailers"}
	for _, f := range got {
		if v, ok := want[f.Name]; ok && v != f.Value {
			t.Errorf("%s = %q, want %q", f.Name, f.Value, v)
		}
		delete(want, f.Name)
	}
	if len(want) != 0 {
		t.Errorf("request block lacks %v", want)
	}

	long := strings.Repeat("b", 4000)
	got = got[:0]
	if _, err := dec.Write(appendLiteral(nil, "x-bomb", long, true)); err != nil {
		t.Fatalf("indexed literal: %v", err)
	}
	got = got[:0]
	if _, err := dec.Write(bytes.Repeat([]byte{0x80 | 62}, 3)); err != nil {
		t.Fatalf("references: %v", err)
	}
	if len(got) != 3 || got[0].Name != "x-bomb" || got[2].Value != long {
		t.Errorf("3 references decoded to %d fields (first %q)", len(got), got[0].Name)
	}
}

// HPACK integers past their prefix continue in 7-bit groups (RFC 7541
// §5.1, C.1.2: 1337 with a 5-bit prefix).
func TestAppendHPACKInt(t *testing.T) {
	if got := appendHPACKInt(nil, 0, 5, 1337); !bytes.Equal(got, []byte{31, 154, 10}) {
		t.Errorf("1337 = %v, want [31 154 10]", got)
	}
	if got := appendHPACKInt(nil, 0x80, 7, 10); !bytes.Equal(got, []byte{0x8a}) {
		t.Errorf("10 = %v, want [0x8a]", got)
	}
}

// The GOAWAY scanner of attackers that do not read finds a GOAWAY's code
// and debug data after other frames, however the bytes are cut.
func TestGoAwayScanner(t *testing.T) {
	var wire []byte
	for range 3 {
		wire = appendFrame(wire, frameSettings, flagAck, 0, nil)
	}
	wire = appendFrame(wire, framePing, flagAck, 0, make([]byte, 8))
	debug := strings.Repeat("x", 60)
	goAway := append([]byte{0, 0, 0, 5, 0, 0, 0, 0xb}, debug...)
	wire = appendFrame(wire, frameGoAway, 0, 0, goAway)
	wire = appendFrame(wire, frameData, 0, 1, []byte("after"))
	for piece := 1; piece <= len(wire); piece++ {
		var s goAwayScanner
		var got [][]byte
		for b := wire; len(b) > 0; {
			n := min(piece, len(b))
			s.scan(b[:n], func(p []byte) { got = append(got, bytes.Clone(p)) })
			b = b[n:]
		}
		if len(got) != 1 || !bytes.Equal(got[0], goAway[:goAwayKept]) {
			t.Fatalf("pieces of %d bytes: found %q, want one GOAWAY %q", piece, got, goAway[:goAwayKept])
		}
	}
}
