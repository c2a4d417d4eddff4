package leangrpc_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// attackHeaderBudget is the most header-block bytes one connection may make
// the server buffer with the default options before it is refused: the
// CONTINUATION flood of 2024 sent up to the 16 MiB list limit on many
// connections at once.
const attackHeaderBudget = 1 << 20

// TestAttackContinuationFlood: HEADERS without END_HEADERS, then
// CONTINUATION frames that never end the block, on several connections at
// once (the CONTINUATION flood of 2024). Each must get GOAWAY before it made
// the server buffer attackHeaderBudget bytes.
func TestAttackContinuationFlood(t *testing.T) {
	missingDefence(t, "header block bytes counted per connection from the first byte under a default bound below the 16 MiB list limit")
	tg := attackTarget(t)
	const conns = 8
	frag := bytes.Repeat([]byte{'a'}, 16<<10)
	for range conns {
		p := tg.peer(t)
		// A literal with a new name whose length announces more than
		// will ever come: the block cannot be decoded before its end.
		var b []byte
		b = append(b, h2test.AppendFrame(nil, h2frame.TypeHeaders, 0, 1, []byte{0x00, 0x7f, 0xff, 0xff, 0xff, 0x07})...)
		for len(b) < 4*attackHeaderBudget {
			b = h2test.AppendFrame(b, h2frame.TypeContinuation, 0, 1, frag)
		}
		done := flood(p.Conn, b)
		wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
		if n := <-done; n > attackHeaderBudget+len(frag)+64 {
			t.Errorf("the server read %d bytes of one header block before its GOAWAY, want at most %d", n, attackHeaderBudget)
		}
	}
	tg.legit(t)
}

// TestAttackEmptyContinuationFlood: empty CONTINUATION frames add nothing
// and cost a frame parse each; their count is bounded.
func TestAttackEmptyContinuationFlood(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	b := h2test.AppendFrame(nil, h2frame.TypeHeaders, 0, 1, []byte{0x82})
	for range 100_000 {
		b = h2test.AppendFrame(b, h2frame.TypeContinuation, 0, 1, nil)
	}
	done := flood(p.Conn, b)
	wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
	<-done
	tg.legit(t)
}

// bombEntry is the value the HPACK bomb inserts into the server's dynamic
// table: it fills the default 4096-byte table alone.
var bombEntry = strings.Repeat("b", 4000)

// insertBombEntry sends a complete UnaryCall on stream id whose header
// block inserts x-bomb: bombEntry into the dynamic table (literal with
// incremental indexing, §6.2.1: index 62 from then on), and reads its
// answer.
func insertBombEntry(t *testing.T, p *h2test.Peer, id uint32) {
	t.Helper()
	block := h2test.EncodeHeaders(h2test.Fields(request(unaryPath)...)...)
	block = append(block, 0x40)
	block = appendLiteral(block, "x-bomb")
	block = appendLiteral(block, bombEntry)
	p.WriteHeadersBlock(id, h2frame.FlagEndHeaders, block)
	p.WriteData(id, true, unaryRequest(1))
	if h := p.WantHeaders(id); h.Get(":status") != "200" {
		t.Fatalf("the request inserting the entry: status %q", h.Get(":status"))
	}
	p.WantBodyTrailers(id, true)
}

// appendLiteral appends s as an HPACK string literal without Huffman
// coding.
func appendLiteral(b []byte, s string) []byte {
	n := len(s)
	if n < 127 {
		return append(append(b, byte(n)), s...)
	}
	b = append(b, 0x7f)
	n -= 127
	for n >= 128 {
		b = append(b, byte(n%128+128))
		n /= 128
	}
	return append(append(b, byte(n)), s...)
}

// TestAttackHPACKBomb: a header block of a few KiB that references a
// 4000-byte dynamic table entry thousands of times decodes to ~16 MB, just
// under the default list limit. Decoding must stop at a size proportional to
// the block's own (the list is refused as too large: 431 and the stream
// reset, as for a list over the limit) while the connection, whose HPACK
// state stays in sync, goes on serving requests that reference the entry
// once.
func TestAttackHPACKBomb(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	insertBombEntry(t, p, 1)
	const refs = 4000 // 4000 × 4038 bytes of list: ~16 MB
	for i := range 3 {
		id := uint32(3 + 4*i)
		block := h2test.EncodeHeaders(h2test.Fields(request(unaryPath)...)...)
		block = append(block, bytes.Repeat([]byte{0x80 | 62}, refs)...)
		p.WriteHeadersBlock(id, h2frame.FlagEndHeaders, block)
		if h := p.WantHeaders(id); h.Get(":status") != "431" {
			t.Fatalf("a %d-byte block referencing a %d-byte entry %d times: status %q, want 431", len(block), len(bombEntry), refs, h.Get(":status"))
		}
		p.WantRST(id, h2frame.ErrCodeNo)
		// The entry referenced once is what legitimate encoders do.
		legit := uint32(5 + 4*i)
		block = h2test.EncodeHeaders(h2test.Fields(request(unaryPath)...)...)
		block = append(block, 0x80|62)
		p.WriteHeadersBlock(legit, h2frame.FlagEndHeaders, block)
		p.WriteData(legit, true, unaryRequest(1))
		if h := p.WantHeaders(legit); h.Get(":status") != "200" {
			t.Fatalf("a request referencing the entry once: status %q", h.Get(":status"))
		}
		p.WantBodyTrailers(legit, true)
	}
	tg.legit(t)
}

// TestAttackZeroLengthHeaders: CVE-2019-9516, a header block of thousands
// of fields with empty names and values. The request is malformed
// (RFC 9113 §8.2.1): its stream is reset with PROTOCOL_ERROR and nothing of
// it is kept; the connection goes on.
func TestAttackZeroLengthHeaders(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	before := heapInUse()
	for i := range 20 {
		id := uint32(1 + 2*i)
		block := h2test.EncodeHeaders(h2test.Fields(request(unaryPath)...)...)
		block = append(block, bytes.Repeat([]byte{0x00, 0x00, 0x00}, 5000)...)
		p.WriteHeadersBlock(id, h2frame.FlagEndHeaders, block)
		p.WantRST(id, h2frame.ErrCodeProtocol)
	}
	if grown := heapInUse() - before; grown > 1<<20 {
		t.Errorf("20 blocks of 5000 empty fields left %d KiB more heap in use", grown>>10)
	}
	tg.legit(t)
}
