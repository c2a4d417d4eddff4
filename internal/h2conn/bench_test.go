package h2conn

import (
	"context"
	"io"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// unaryHandler answers each stream with headers, one DATA frame echoing the
// request and trailers, as a unary gRPC call does.
func unaryHandler(pool *bufpool.Pool, hold bool) Handler {
	return HandlerFunc(func(s *Stream) {
		go func() {
			var in *bufpool.Buffer
			for {
				b, err := s.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					return
				}
				if in == nil {
					in = b
				} else {
					b.Free()
				}
			}
			s.Send(holding(HeadersItem(respFields, false), hold))
			if in != nil {
				s.Send(holding(DataItem(in, false), hold))
			}
			s.Send(TrailersItem(trailerFields))
			s.Release()
		}()
	})
}

var benchReq = reqFields("/bench")

func unaryCall(tb testing.TB, c *Conn, pool *bufpool.Pool, payload []byte, hold bool) {
	s, err := c.NewStream(context.Background(), benchReq, StreamOptions{Unary: hold})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Send(DataItem(pool.Copy(payload), true)); err != nil {
		tb.Fatal(err)
	}
	if _, _, err := s.RecvHeaders(); err != nil {
		tb.Fatal(err)
	}
	for {
		b, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		b.Free()
	}
	s.Release()
}

func BenchmarkConn(b *testing.B) {
	for _, size := range []int{100, 1 << 20} {
		for _, hold := range []bool{false, true} {
			name := "Unary/" + sizeName(size) + "/flush"
			if hold {
				name = "Unary/" + sizeName(size) + "/hold"
			}
			b.Run(name, func(b *testing.B) {
				h := func(pool *bufpool.Pool) Handler { return unaryHandler(pool, hold) }
				p := newPair(b, Config{}, Config{}, h, true)
				defer p.close(b)
				payload := make([]byte, size)
				unaryCall(b, p.client, p.pool, payload, hold)
				b.SetBytes(int64(2 * size))
				b.ReportAllocs()
				for b.Loop() {
					unaryCall(b, p.client, p.pool, payload, hold)
				}
			})
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return "1MiB"
	}
	return "100B"
}

// BenchmarkConn/UnaryParallel: 64 concurrent unary calls on one connection.
func BenchmarkConnParallel(b *testing.B) {
	h := func(pool *bufpool.Pool) Handler { return unaryHandler(pool, true) }
	p := newPair(b, Config{}, Config{}, h, true)
	defer p.close(b)
	payload := make([]byte, 100)
	unaryCall(b, p.client, p.pool, payload, true)
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			unaryCall(b, p.client, p.pool, payload, true)
		}
	})
}
