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
	// Runs of equal lengths (guessed right) and changes (guessed wrong).
	msgs := [][]byte{big, small, big, big, big, nil, big[:5000], big[:5000], big, big[:4096], append(big, big[:4395]...)}
	var stream []byte
	for _, m := range msgs {
		stream = append(stream, frame(false, m)...)
	}
	// window > 0: the Parser's Window, and the transport takes a buffer
	// for a range without one of what arrives plus window only, as h2conn
	// does, so gathering buffers grow.
	for _, window := range []int{0, 20000, 3} {
		for _, size := range []int{7, 3001, 3000, 16384, 16385, 70000} {
			p := Parser{Pool: pool, Window: window}
			var got [][]byte
			landed := 0
			// The transport's registration, as h2conn keeps it: it lives until
			// its range is full or a payload is handed over instead.
			var reg *bufpool.Buffer
			var regOff, regEnd int
			handed := false // reg was taken by the transport and not yet handed over
			// Frames end at message boundaries (as a leangrpc sender's do)
			// for even sizes, anywhere for odd ones.
			var cuts []int
			for off, i := 0, 0; off < len(stream); i++ {
				end := len(stream)
				if size%2 == 0 {
					end = off + PrefixLen + len(msgs[i])
				}
				for ; off < end; off += min(size, end-off) {
					cuts = append(cuts, min(size, end-off))
				}
			}
			for i, rest := 0, stream; len(rest) > 0; i++ {
				n := cuts[i]
				if reg == nil && i%4 != 3 {
					if dst, from, to := p.Sink(); to > from {
						if dst == nil {
							if window > 0 {
								to = min(to, n+window)
							}
							dst, handed = pool.Get(to), true
						} else {
							dst.Ref()
						}
						reg, regOff, regEnd = dst, from, to
					}
				}
				if reg != nil && i%4 != 3 {
					k := min(n, regEnd-regOff)
					copy(reg.Bytes()[regOff:], rest[:k])
					regOff += k
					var took *bufpool.Buffer
					if handed {
						took, handed = reg, false
						reg.Ref() // the transport keeps its own
					}
					p.Landed(took, k)
					landed += k
					rest = rest[k:]
					n -= k
					if regOff == regEnd || n > 0 {
						reg.Free()
						reg = nil
					}
				}
				if n > 0 {
					if reg != nil {
						reg.Free() // a payload handed over ends the registration
						reg = nil
					}
					p.Push(pool.Copy(rest[:n]))
					rest = rest[n:]
				}
				for {
					m, ok, err := p.Next()
					if err != nil {
						t.Fatalf("window %d size %d: %v", window, size, err)
					}
					if !ok {
						break
					}
					got = append(got, m.Data.Materialize())
					m.Free()
				}
			}
			if len(got) != len(msgs) {
				t.Fatalf("window %d size %d: %d messages, want %d", window, size, len(got), len(msgs))
			}
			for i := range msgs {
				if !bytes.Equal(got[i], msgs[i]) {
					t.Errorf("window %d size %d: message %d differs", window, size, i)
				}
			}
			if reg != nil {
				reg.Free()
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
}

// A large message's range is offered as soon as its prefix is known, even
// when nothing of its body has come yet, without a buffer (nothing is held
// on a prefix alone); a message over the receive limit is refused on its
// prefix with nothing buffered and no Sink.
func TestParserSinkOnPrefix(t *testing.T) {
	pool := bufpool.New(nil)
	pre := make([]byte, PrefixLen)
	PutPrefix(pre, false, 1<<20)
	p := Parser{Pool: pool}
	p.Push(pool.Copy(pre))
	if _, ok, err := p.Next(); ok || err != nil {
		t.Fatalf("Next = %v, %v", ok, err)
	}
	if dst, from, to := p.Sink(); dst != nil || from != 0 || to != 1<<20 {
		t.Fatalf("Sink = %v, %d, %d; want no buffer, 0, %d", dst != nil, from, to, 1<<20)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("%d buffers held on a prefix alone", n)
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
