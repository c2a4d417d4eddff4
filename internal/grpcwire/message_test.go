package grpcwire

import (
	"bytes"
	"sync"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func frame(compressed bool, payload []byte) []byte {
	b := make([]byte, PrefixLen+len(payload))
	PutPrefix(b, compressed, uint32(len(payload)))
	copy(b[PrefixLen:], payload)
	return b
}

// feed splits data into buffers of the given sizes (the last one takes
// the rest) and pushes them.
func feed(p *Parser, pool *bufpool.Pool, data []byte, sizes ...int) {
	for _, n := range sizes {
		if n > len(data) {
			n = len(data)
		}
		p.Push(pool.Copy(data[:n]))
		data = data[n:]
	}
	if len(data) > 0 {
		p.Push(pool.Copy(data))
	}
}

func TestParserSplits(t *testing.T) {
	pool := bufpool.New(nil)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16000 bytes: pooled by mem
	small := []byte("hello")
	stream := append(append(append(frame(false, big), frame(true, gzipped(t, small))...), frame(false, nil)...), frame(false, big)...)
	splits := [][]int{
		{len(stream)},
		{1, 1, 1, 1, 1, 1},
		{3, 16000, 2},
		{PrefixLen + len(big), PrefixLen + len(small), PrefixLen},
		{7, 7, 7, 7, 100, 9000, 9000},
	}
	for _, sizes := range splits {
		var p Parser
		p.SetEncoding("gzip")
		feed(&p, pool, stream, sizes...)
		var got [][]byte
		var flags []bool
		for {
			m, ok, err := p.Next()
			if err != nil {
				t.Fatalf("%v: %v", sizes, err)
			}
			if !ok {
				break
			}
			got = append(got, m.Data.Materialize())
			flags = append(flags, m.Compressed)
			m.Free()
		}
		if len(got) != 4 || !bytes.Equal(got[0], big) || !bytes.Equal(got[1], small) || len(got[2]) != 0 || !bytes.Equal(got[3], big) {
			t.Fatalf("%v: got %d messages", sizes, len(got))
		}
		if flags[0] || !flags[1] || flags[2] {
			t.Errorf("%v: flags %v", sizes, flags)
		}
		if p.InProgress() || p.Buffered() != 0 {
			t.Errorf("%v: leftover %d", sizes, p.Buffered())
		}
		p.Close()
		if n := pool.Outstanding(); n != 0 {
			t.Errorf("%v: %d buffers outstanding", sizes, n)
		}
	}
}

func TestParserZeroCopyInOneBuffer(t *testing.T) {
	pool := bufpool.New(nil)
	payload := bytes.Repeat([]byte{7}, 8000)
	b := pool.Copy(frame(false, payload))
	inBuf := b.Bytes()
	var p Parser
	p.Push(b)
	m, ok, err := p.Next()
	if !ok || err != nil {
		t.Fatalf("Next: %v %v", ok, err)
	}
	if len(m.Data) != 1 {
		t.Fatalf("message in one DATA buffer came as %d pieces", len(m.Data))
	}
	if &m.Data[0].ReadOnlyData()[0] != &inBuf[PrefixLen] {
		t.Error("message in one DATA buffer was copied")
	}
	if pool.Outstanding() != 1 {
		t.Errorf("outstanding %d while the message is held", pool.Outstanding())
	}
	m.Free()
	p.Close()
	if pool.Outstanding() != 0 {
		t.Errorf("outstanding %d after Free", pool.Outstanding())
	}
}

func TestParserLimitsCheckedOnPrefix(t *testing.T) {
	pool := bufpool.New(nil)
	var p Parser
	p.MaxRecv = 10
	pre := make([]byte, PrefixLen)
	PutPrefix(pre, false, 11)
	p.Push(pool.Copy(pre)) // only the prefix: the limit must trip before the body
	_, _, err := p.Next()
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("over limit: %v, want ResourceExhausted", err)
	}
	p.Close()

	p = Parser{}
	p.Push(pool.Copy([]byte{2, 0, 0, 0, 0}))
	if _, _, err := p.Next(); status.Code(err) != codes.Internal {
		t.Errorf("flag 2: %v, want Internal", err)
	}
	p.Close()

	p = Parser{}
	PutPrefix(pre, false, DefaultMaxRecvMsgSize+1)
	p.Push(pool.Copy(pre))
	if _, _, err := p.Next(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("default limit: %v, want ResourceExhausted", err)
	}
	p.Close()

	p = Parser{}
	p.Push(pool.Copy(frame(false, []byte("abc"))[:6]))
	if _, ok, err := p.Next(); ok || err != nil || !p.InProgress() || p.Need() != 2 {
		t.Errorf("truncated: ok %v err %v inProgress %v need %d", ok, err, p.InProgress(), p.Need())
	}
	p.Close()
	if pool.Outstanding() != 0 {
		t.Errorf("outstanding %d", pool.Outstanding())
	}
}

func TestEncodeDecodeMessage(t *testing.T) {
	codec := encoding.GetCodecV2("proto")
	in := &grpc_testing.SimpleRequest{ResponseSize: 42, Payload: &grpc_testing.Payload{Body: bytes.Repeat([]byte{1}, 3000)}}
	pre, data, err := EncodeMessage(codec, in, 0)
	if err != nil {
		t.Fatal(err)
	}
	if pre[0] != 0 || int(pre[1])<<24|int(pre[2])<<16|int(pre[3])<<8|int(pre[4]) != data.Len() {
		t.Fatalf("prefix %v for %d bytes", pre, data.Len())
	}
	var out grpc_testing.SimpleRequest
	if err := DecodeMessage(codec, Message{Data: data}, &out, true); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, &out) {
		t.Error("round trip differs")
	}
	if _, _, err := EncodeMessage(codec, in, 100); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("send limit: %v", err)
	}
}

func TestParserSmallMessageViewsItsBuffer(t *testing.T) {
	pool := bufpool.New(nil)
	b := pool.Copy(append(frame(false, []byte("tiny")), frame(false, []byte("two"))...))
	inBuf := b.Bytes()
	var p Parser
	p.Push(b)
	m1, ok, err := p.Next()
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if &m1.Data[0].ReadOnlyData()[0] != &inBuf[PrefixLen] {
		t.Error("small message was copied")
	}
	if string(m1.Data[0].ReadOnlyData()) != "tiny" {
		t.Errorf("first message %q", m1.Data[0].ReadOnlyData())
	}
	m1.Free()
	m2, ok, _ := p.Next()
	if !ok || string(m2.Data[0].ReadOnlyData()) != "two" {
		t.Fatalf("second message %v %q", ok, m2.Data.Materialize())
	}
	if pool.Outstanding() != 1 {
		t.Errorf("outstanding %d while the second message is held", pool.Outstanding())
	}
	m2.Free()
	p.Close()
	if pool.Outstanding() != 0 {
		t.Errorf("outstanding %d after Free", pool.Outstanding())
	}
}

// TestParserGathersSpanningMessages pushes a stream payload by payload,
// asking for messages after each push as the streams do, and checks that
// every message comes out whole in one buffer, whatever the split, with
// nothing left outstanding.
func TestParserGathersSpanningMessages(t *testing.T) {
	pool := bufpool.New(nil)
	big := bytes.Repeat([]byte("0123456789abcdef"), 4100) // 65600 bytes
	mid := bytes.Repeat([]byte("xy"), 300)                // 600 bytes: below mem's pooling threshold
	msgs := [][]byte{big, mid, nil, big, []byte("z"), mid}
	var stream []byte
	for _, m := range msgs {
		stream = append(stream, frame(false, m)...)
	}
	for _, size := range []int{1, 3, 7, 100, 599, 4096, 16384, 16384 + 3, 70000} {
		p := Parser{Pool: pool}
		var got [][]byte
		for i, rest := 0, stream; len(rest) > 0; i++ {
			n := min(size, len(rest))
			if i%3 == 2 {
				p.PushMem(pool.Copy(rest[:n]).Mem())
			} else {
				p.Push(pool.Copy(rest[:n]))
			}
			rest = rest[n:]
			for {
				m, ok, err := p.Next()
				if err != nil {
					t.Fatalf("size %d: %v", size, err)
				}
				if !ok {
					break
				}
				if len(m.Data) > 1 {
					t.Errorf("size %d: message %d in %d buffers", size, len(got), len(m.Data))
				}
				got = append(got, m.Data.Materialize())
				m.Free()
			}
		}
		if len(got) != len(msgs) {
			t.Fatalf("size %d: got %d messages, want %d", size, len(got), len(msgs))
		}
		for i := range msgs {
			if !bytes.Equal(got[i], msgs[i]) {
				t.Errorf("size %d: message %d differs (%d vs %d bytes)", size, i, len(got[i]), len(msgs[i]))
			}
		}
		if p.InProgress() || p.Buffered() != 0 {
			t.Errorf("size %d: leftover %d", size, p.Buffered())
		}
		p.Close()
		if n := pool.Outstanding(); n != 0 {
			t.Errorf("size %d: %d buffers outstanding", size, n)
		}
	}
}

// TestParserCloseMidGather frees a half-gathered message.
func TestParserCloseMidGather(t *testing.T) {
	pool := bufpool.New(nil)
	data := frame(false, bytes.Repeat([]byte("a"), 50000))
	p := Parser{Pool: pool}
	p.Push(pool.Copy(data[:20000]))
	if _, ok, err := p.Next(); ok || err != nil {
		t.Fatalf("Next = %v, %v", ok, err)
	}
	p.Push(pool.Copy(data[20000:40000]))
	if _, ok, err := p.Next(); ok || err != nil {
		t.Fatalf("Next = %v, %v", ok, err)
	}
	if need := p.Need(); need != len(data)-40000 {
		t.Errorf("Need = %d, want %d", need, len(data)-40000)
	}
	if !p.InProgress() {
		t.Error("not in progress mid-message")
	}
	p.Close()
	if n := pool.Outstanding(); n != 0 {
		t.Errorf("%d buffers outstanding", n)
	}
}

// TestParserGatherAllocs: a 1 MiB message arriving as 64 frames costs a
// bounded number of allocations (no view or list per frame).
func TestParserGatherAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	pool := bufpool.New(nil)
	data := frame(false, bytes.Repeat([]byte("b"), 1<<20))
	var p Parser
	p.Pool = pool
	allocs := testing.AllocsPerRun(20, func() {
		for rest := data; len(rest) > 0; {
			n := min(16384, len(rest))
			b := pool.Get(n)
			copy(b.Bytes(), rest[:n])
			p.Push(b)
			rest = rest[n:]
			m, ok, err := p.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				m.Free()
			}
		}
	})
	if allocs > 4 {
		t.Errorf("%.1f allocations per 1 MiB message, want at most 4", allocs)
	}
	p.Close()
}

// keepingCodec is a codec that keeps what Unmarshal is given, taking its
// own references as CodecV2 allows.
type keepingCodec struct{ kept []mem.BufferSlice }

func (*keepingCodec) Name() string                         { return "keep" }
func (*keepingCodec) Marshal(any) (mem.BufferSlice, error) { return nil, nil }
func (c *keepingCodec) Unmarshal(data mem.BufferSlice, _ any) error {
	data.Ref()
	c.kept = append(c.kept, append(mem.BufferSlice(nil), data...))
	return nil
}

// Small messages, views of a pooled buffer for the proto codec, reach a
// codec that keeps them as bytes that stay intact after the Parser moves on
// and the buffer goes back to the pool; with the proto codec they stay
// views (no copy, no allocation: TestUnaryCallAllocations).
func TestDecodeMessageKeepingCodec(t *testing.T) {
	pool := bufpool.New(nil)
	want := []string{"tiny", "two", string(bytes.Repeat([]byte("x"), 2000))}
	small := append(frame(false, []byte(want[0])), frame(false, []byte(want[1]))...)
	p := Parser{Pool: pool}
	p.Push(pool.Copy(small)) // below mem's pooling threshold: viewed
	p.Push(pool.Copy(frame(false, []byte(want[2]))))
	c := &keepingCodec{}
	for range want {
		m, ok, err := p.Next()
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		if err := DecodeMessage(c, m, nil, false); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	// Reuse the freed memory.
	for range 4 {
		b := pool.Get(len(small))
		clear(b.Bytes())
		b.Free()
	}
	for i, d := range c.kept {
		if got := string(d.Materialize()); got != want[i] {
			t.Errorf("kept message %d is %.16q, want %.16q", i, got, want[i])
		}
		d.Free()
	}
	if n := pool.Outstanding(); n != 0 {
		t.Errorf("%d buffers outstanding", n)
	}
}

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

// TestParserPrefixAllocation: a peer's 5-byte prefix announcing a
// message of MaxRecv bytes, with nothing of the message behind it, should
// not make the receiver hold a buffer of that size: a peer opening many
// streams could otherwise make a server hold MaxRecv per stream for a few
// bytes each (grpc-go's receiver holds only what arrived). Parser.Next
// gathers from the prefix on (gather, gatherEarly) and takes the whole
// buffer at once.
func TestParserPrefixAllocation(t *testing.T) {
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
