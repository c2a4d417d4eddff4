package grpcwire

import (
	"bytes"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestParserSinkLands plays the transport of h2conn.Stream.RecvInto: while
// the Parser gathers a message, the next bytes are written straight into
// the buffer Sink names and reported with Landed; otherwise they come as
// payloads. Messages must come out whole and in order whatever the mix.
func TestParserSinkLands(t *testing.T) {
	pool := bufpool.New(nil)
	big := bytes.Repeat([]byte("0123456789abcdef"), 4100) // 65600 bytes
	small := []byte("tiny")
	msgs := [][]byte{big, small, big, nil, big[:5000], big}
	var stream []byte
	for _, m := range msgs {
		stream = append(stream, frame(false, m)...)
	}
	for _, size := range []int{7, 3000, 16384, 70000} {
		p := Parser{Pool: pool}
		var got [][]byte
		landed := 0
		for i, rest := 0, stream; len(rest) > 0; i++ {
			n := min(size, len(rest))
			if dst, from, to := p.Sink(); dst != nil && i%4 != 3 {
				k := min(n, to-from)
				copy(dst.Bytes()[from:], rest[:k])
				p.Landed(k)
				landed += k
				n = k
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
				got = append(got, m.Data.Materialize())
				m.Free()
			}
		}
		if len(got) != len(msgs) {
			t.Fatalf("size %d: %d messages, want %d", size, len(got), len(msgs))
		}
		for i := range msgs {
			if !bytes.Equal(got[i], msgs[i]) {
				t.Errorf("size %d: message %d differs", size, i)
			}
		}
		if landed == 0 {
			t.Errorf("size %d: nothing landed", size)
		}
		p.Close()
		if n := pool.Outstanding(); n != 0 {
			t.Errorf("size %d: %d buffers outstanding", size, n)
		}
	}
}

// A large message's buffer is offered as soon as its prefix is known, even
// when nothing of its body has come yet; a message over the receive limit
// is refused on its prefix with nothing buffered and no Sink.
func TestParserSinkOnPrefix(t *testing.T) {
	pool := bufpool.New(nil)
	pre := make([]byte, PrefixLen)
	PutPrefix(pre, false, 1<<20)
	p := Parser{Pool: pool}
	p.Push(pool.Copy(pre))
	if _, ok, err := p.Next(); ok || err != nil {
		t.Fatalf("Next = %v, %v", ok, err)
	}
	if dst, from, to := p.Sink(); dst == nil || from != 0 || to != 1<<20 || dst.Len() < to {
		t.Fatalf("Sink = %v, %d, %d; want the message's buffer, 0, %d", dst != nil, from, to, 1<<20)
	}
	p.Close()

	p = Parser{Pool: pool, MaxRecv: 1 << 19}
	p.Push(pool.Copy(append(pre, 1, 2, 3)))
	if _, _, err := p.Next(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the limit: %v; want ResourceExhausted", err)
	}
	if dst, _, _ := p.Sink(); dst != nil {
		t.Fatal("a buffer offered for a message over the limit")
	}
	if n := pool.Outstanding(); n != 1 {
		t.Fatalf("%d buffers outstanding; want only the payload", n)
	}
	p.Close()
	if n := pool.Outstanding(); n != 0 {
		t.Errorf("%d buffers outstanding", n)
	}
}
