//go:build linux && !leangrpcportable

package sockio

import (
	"net"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// pump writes chunk to c until c fails, then closes done.
func pump(c net.Conn, chunk []byte, done chan<- struct{}) {
	defer close(done)
	for {
		if _, err := c.Write(chunk); err != nil {
			return
		}
	}
}

// drain reads from c until it fails, then closes done.
func drain(c net.Conn, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 256<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// BenchmarkReadReady compares reading a stream in 16 KiB frames' worth with
// ReadReady (a pool buffer per read, none held while idle) against Read into
// one buffer held for the conn's life. Each op consumes 16 KiB.
func BenchmarkReadReady(b *testing.B) {
	const frame = 16 << 10
	for _, impl := range []string{"pooled", "held"} {
		b.Run("16KiB/"+impl, func(b *testing.B) {
			client, server := tcpPair(b)
			done := make(chan struct{})
			go pump(client, make([]byte, frame), done)
			c := Wrap(server, true).(*Conn)
			pool := bufpool.New(nil)
			held := make([]byte, frame+9)
			b.SetBytes(frame)
			b.ReportAllocs()
			for b.Loop() {
				for got := 0; got < frame; {
					if impl == "pooled" {
						buf, err := c.ReadReady(pool, min(frame+9, frame-got))
						if err != nil {
							b.Fatal(err)
						}
						got += buf.Len()
						buf.Free()
					} else {
						n, err := server.Read(held[:frame-got])
						if err != nil {
							b.Fatal(err)
						}
						got += n
					}
				}
			}
			b.StopTimer()
			server.Close()
			client.Close()
			<-done
		})
	}
}

// BenchmarkWriteVec compares WriteVec (writev through the RawConn with a
// reused iovec array) against net.Buffers.WriteTo on the TCP conn.
func BenchmarkWriteVec(b *testing.B) {
	for _, shape := range []struct {
		name    string
		n, size int
	}{
		{"8x1KiB", 8, 1 << 10},
		{"64x256B", 64, 256},
		{"4x16KiB", 4, 16 << 10},
	} {
		bufs := make([][]byte, shape.n)
		for i := range bufs {
			bufs[i] = make([]byte, shape.size)
		}
		for _, impl := range []string{"writev", "buffers"} {
			b.Run(shape.name+"/"+impl, func(b *testing.B) {
				client, server := tcpPair(b)
				done := make(chan struct{})
				go drain(server, done)
				vw := Wrap(client, true).(*Conn)
				b.SetBytes(int64(shape.n * shape.size))
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if impl == "writev" {
						_, err = vw.WriteVec(bufs)
					} else {
						nb := net.Buffers(append([][]byte(nil), bufs...))
						_, err = nb.WriteTo(client)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				client.Close()
				<-done
			})
		}
	}
}
