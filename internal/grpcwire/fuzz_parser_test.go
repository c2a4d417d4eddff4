package grpcwire

import (
	"bytes"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// FuzzParser feeds a Parser a stream of messages cut into payloads at
// fuzzed places, playing the transport as h2conn does: where Sink offers a
// range the payload's bytes land in it (in a buffer the "transport" takes
// for a range without one, of a fuzzed size no larger than asked), else
// the payload is pushed; some messages go gzipped, flag set, for the
// Parser to inflate. Every message the stream holds must come out
// whole and in order, a bad prefix must give an error, and the pool must
// get every buffer back.
func FuzzParser(f *testing.F) {
	f.Add([]byte{0x10, 0x80, 0x03, 0x40, 0xff}, []byte{7, 200, 13, 0, 64}, uint16(0))
	f.Add([]byte{0xff, 0xff, 0x20}, []byte{255, 255, 1, 1, 1, 90}, uint16(300))
	f.Add([]byte{0x05, 0x00, 0xf0}, []byte{3, 9, 27, 81}, uint16(7))
	f.Fuzz(func(t *testing.T, msgs []byte, cuts []byte, window uint16) {
		if len(msgs) > 24 || len(cuts) == 0 {
			return
		}
		pool := bufpool.Default()
		before := pool.Outstanding()

		// The stream: one message per byte of msgs, its length scaled
		// so that some span many payloads (gatherEarly is 4 KiB); a
		// byte of 0xff is a prefix with an unknown flag.
		var stream []byte
		var want [][]byte
		bad := false
		for i, m := range msgs {
			n := int(m) * 131 % 20011
			if m == 0xff {
				stream = append(stream, 2, 0, 0, 0, 1, 'x')
				bad = true
				break
			}
			var pre [PrefixLen]byte
			body := bytes.Repeat([]byte{byte(i + 1)}, n)
			for j := range body {
				body[j] ^= byte(j)
			}
			wire := body
			if m%5 == 1 {
				// Every fifth length goes gzipped, flag set.
				wire = gzipped(t, body)
			}
			PutPrefix(pre[:], m%5 == 1, uint32(len(wire)))
			stream = append(stream, pre[:]...)
			stream = append(stream, wire...)
			want = append(want, body)
		}

		p := &Parser{Pool: pool, Window: int(window)}
		p.SetEncoding("gzip")
		defer func() {
			p.Close()
			if got := pool.Outstanding(); got != before {
				t.Fatalf("pool: %d buffers out after Close, want %d", got, before)
			}
		}()
		var got [][]byte
		var perr error
		drain := func() bool {
			for {
				msg, ok, err := p.Next()
				if err != nil {
					perr = err
					return false
				}
				if !ok {
					return true
				}
				var b []byte
				for _, d := range msg.Data {
					b = append(b, d.ReadOnlyData()...)
				}
				msg.Free()
				got = append(got, b)
			}
		}
		rest := stream
		for i := 0; len(rest) > 0 && perr == nil; i++ {
			c := int(cuts[i%len(cuts)])*37%9000 + 1
			c = min(c, len(rest))
			payload := rest[:c]
			rest = rest[c:]
			for len(payload) > 0 {
				b, from, to := p.Sink()
				land := cuts[(i+len(payload))%len(cuts)]&1 == 0
				if to <= from || !land {
					p.Push(pool.Copy(payload))
					payload = nil
					break
				}
				if b == nil {
					// The transport takes a buffer of at most to bytes
					// (h2conn: what arrived plus the stream window).
					k := to - int(cuts[i%len(cuts)])*53%max(to, 1)
					k = max(k, 1)
					tb := pool.Get(k)
					n := min(len(payload), k)
					copy(tb.Bytes(), payload[:n])
					p.Landed(tb, n)
					payload = payload[n:]
					continue
				}
				n := min(len(payload), to-from)
				copy(b.Bytes()[from:from+n], payload[:n])
				p.Landed(nil, n)
				payload = payload[n:]
			}
			if !drain() {
				break
			}
		}
		if perr == nil {
			drain()
		}
		if bad && perr == nil {
			t.Fatalf("a prefix with flag 2 gave no error (%d messages out)", len(got))
		}
		if !bad && perr != nil {
			t.Fatalf("well-formed stream: %v", perr)
		}
		if !bad && len(got) != len(want) {
			t.Fatalf("%d messages out, want %d", len(got), len(want))
		}
		for i := range got {
			if i >= len(want) || !bytes.Equal(got[i], want[i]) {
				t.Fatalf("message %d: %d bytes, differ from the %d sent", i, len(got[i]), len(want[min(i, len(want)-1)]))
			}
		}
	})
}
