package grpcwire

import (
	"bytes"
	"sync"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// byteCountingPool is a mem.BufferPool that counts the bytes it handed out
// and has not got back.
type byteCountingPool struct {
	mu   sync.Mutex
	held int
	max  int
}

func (c *byteCountingPool) Get(n int) *[]byte {
	b := make([]byte, n)
	c.mu.Lock()
	c.held += n
	c.max = max(c.max, c.held)
	c.mu.Unlock()
	return &b
}

func (c *byteCountingPool) Put(b *[]byte) {
	c.mu.Lock()
	c.held -= cap(*b)
	c.mu.Unlock()
}

// TestReviewParserPrefixAllocation: a peer's 5-byte prefix announcing a
// message of MaxRecv bytes, with nothing of the message behind it, should
// not make the receiver hold a buffer of that size: a peer opening many
// streams could otherwise make a server hold MaxRecv per stream for a few
// bytes each (grpc-go's receiver holds only what arrived). Parser.Next
// gathers from the prefix on (gather, gatherEarly) and takes the whole
// buffer at once.
func TestReviewParserPrefixAllocation(t *testing.T) {
	src := &byteCountingPool{}
	pool := bufpool.New(src)
	p := Parser{Pool: pool}
	const announced = 4 << 20
	var pre [PrefixLen]byte
	PutPrefix(pre[:], false, announced-1)
	p.Push(pool.Copy(pre[:]))
	if _, ok, err := p.Next(); ok || err != nil {
		t.Fatalf("Next: ok %v err %v", ok, err)
	}
	held := src.held
	p.Close()
	// Generous: what a stream window (and a BDP-grown one) could bring.
	const bound = 1 << 20
	if held > bound {
		t.Errorf("a lone 5-byte prefix made the receiver hold %d bytes (announced %d), want at most %d", held, announced, bound)
	}
}

// A message longer than the Parser's Window, pushed in pieces, is gathered
// in a buffer that grows with what arrived: never more than twice what
// arrived plus the window is held, and the message comes out intact.
func TestParserGatherGrowsWithArrivals(t *testing.T) {
	src := &byteCountingPool{}
	pool := bufpool.New(src)
	const window = 64 << 10
	p := Parser{Pool: pool, Window: window}
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i) ^ byte(i>>9)
	}
	data := frame(false, body)
	got := 0
	var msg []byte
	for off := 0; off < len(data); off += 16384 {
		piece := data[off:min(off+16384, len(data))]
		p.Push(pool.Copy(piece))
		got += len(piece)
		m, ok, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		if held := src.held; held > 2*(got+window) {
			t.Fatalf("%d bytes arrived, %d held; want at most %d", got, held, 2*(got+window))
		}
		if ok {
			msg = m.Data.Materialize()
			m.Free()
		}
	}
	if !bytes.Equal(msg, body) {
		t.Fatalf("message of %d bytes differs from the %d sent", len(msg), len(body))
	}
	p.Close()
	if src.held != 0 {
		t.Errorf("%d bytes held after Close", src.held)
	}
}
