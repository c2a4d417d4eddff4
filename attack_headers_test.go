package leangrpc_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
)

// headerBlockShare is what one connection's header block may grow to
// whatever the pressure on the memory budget (h2frame's headerBlockShare).
const headerBlockShare = 64 << 10

// TestAttackContinuationFlood: HEADERS without END_HEADERS, then
// CONTINUATION frames that never end the block, on many connections at
// once (the CONTINUATION flood of 2024). Each connection may buffer a block
// up to its 16 MiB list limit, but the sum over connections is bounded by
// the memory budget's soft level (the server's own account): the
// connections whose block would grow past it get GOAWAY ENHANCE_YOUR_CALM.
func TestAttackContinuationFlood(t *testing.T) {
	const budget = 64 << 20
	tg := attackTarget(t, leangrpc.MemoryBudget(budget))
	soft := int64(budget - budget/4)
	const conns, each = 16, 6 << 20 // 96 MiB asked for together
	frag := bytes.Repeat([]byte{'a'}, 16<<10)
	// A literal with a new name whose length announces more than will
	// ever come: the block cannot be decoded before its end.
	b := h2test.AppendFrame(nil, h2frame.TypeHeaders, 0, 1, []byte{0x00, 0x7f, 0xff, 0xff, 0xff, 0x07})
	for len(b) < each {
		b = h2test.AppendFrame(b, h2frame.TypeContinuation, 0, 1, frag)
	}
	var peers []*h2test.Peer
	var floods []<-chan int
	for range conns {
		p := tg.peer(t)
		peers = append(peers, p)
		floods = append(floods, flood(p.Conn, b))
	}
	for _, f := range floods {
		<-f
	}
	refused := 0
	for _, p := range peers {
		// A connection holding its block waits for the rest: nothing
		// comes. One refused gets its GOAWAY (the wait is generous for
		// a loaded machine; only the connections held pay it).
		f, err := p.ReadFrame(500 * time.Millisecond)
		for err == nil && f.Type != h2frame.TypeGoAway {
			f, err = p.ReadFrame(500 * time.Millisecond)
		}
		if err == nil {
			if f.ErrCode() != h2frame.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM", f.ErrCode(), f.DebugData())
			}
			refused++
		}
	}
	held := leangrpc.MemoryInUse(tg.srv)
	t.Logf("%d connections flooding %d MiB of CONTINUATION each: %d refused, %d MiB held", conns, each>>20, refused, held>>20)
	if max := soft + conns*2*headerBlockShare; held > max {
		t.Errorf("the server holds %d MiB, bound %d MiB", held>>20, max>>20)
	}
	if want := conns - int(soft/each); refused < want {
		t.Errorf("%d refused, want at least %d", refused, want)
	}
	for _, p := range peers {
		p.Close()
	}
	// The account is back to zero (attackTarget's cleanup) once the
	// connections ended; the legitimate call comes after, since new
	// connections are refused while the budget is under pressure.
	tg.checkMemory(t, 0)
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

// TestAttackHPACKBombFlood: bombs sent one after the other. Each costs the
// server decoding up to the list bound, so a connection sending more than
// ten a second gets GOAWAY ENHANCE_YOUR_CALM.
func TestAttackHPACKBombFlood(t *testing.T) {
	tg := attackTarget(t)
	p := tg.peer(t)
	insertBombEntry(t, p, 1)
	block := h2test.EncodeHeaders(h2test.Fields(request(unaryPath)...)...)
	block = append(block, bytes.Repeat([]byte{0x80 | 62}, 4000)...)
	var b []byte
	for i := range 50 {
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders|h2frame.FlagEndStream, uint32(3+2*i), block)
	}
	done := flood(p.Conn, b)
	wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
	<-done
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
