package h2frame

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"golang.org/x/net/http2"
	xhpack "golang.org/x/net/http2/hpack"
)

// BenchmarkFramer compares the frame layer with x/net's Framer (and its
// hpack) doing the same work: reading DATA into a buffer the caller owns,
// writing DATA from a caller's buffer, and reading and writing a gRPC
// request header block. Sources and sinks are in memory.
func BenchmarkFramer(b *testing.B) {
	sizes := []struct {
		name string
		n    int
	}{{"100B", 100}, {"16KiB", 16 << 10}, {"1MiB", 1 << 20}}
	for _, sz := range sizes {
		b.Run("ReadData/"+sz.name+"/leangrpc", func(b *testing.B) { benchReadDataLean(b, sz.n) })
		b.Run("ReadData/"+sz.name+"/xnet", func(b *testing.B) { benchReadDataXnet(b, sz.n) })
	}
	for _, sz := range sizes {
		b.Run("WriteData/"+sz.name+"/leangrpc", func(b *testing.B) { benchWriteDataLean(b, sz.n) })
		b.Run("WriteData/"+sz.name+"/xnet", func(b *testing.B) { benchWriteDataXnet(b, sz.n) })
	}
	b.Run("ReadHeaders/grpc-request/leangrpc", benchReadHeadersLean)
	b.Run("ReadHeaders/grpc-request/xnet", benchReadHeadersXnet)
	b.Run("WriteHeaders/grpc-request/leangrpc", benchWriteHeadersLean)
	b.Run("WriteHeaders/grpc-request/xnet", benchWriteHeadersXnet)
}

// dataWire encodes n payload bytes as DATA frames of at most 16 KiB; it
// returns the bytes and the frame count.
func dataWire(n int) ([]byte, int) {
	var w bytes.Buffer
	frames := 0
	for n > 0 {
		k := min(n, MinMaxFrameSize)
		w.Write(frameBytes(TypeData, 0, 1, make([]byte, k)))
		n -= k
		frames++
	}
	return w.Bytes(), frames
}

func benchReadDataLean(b *testing.B, n int) {
	wire, frames := dataWire(n)
	r := NewReader(&loopReader{loop: wire}, ReaderConfig{})
	defer r.Close()
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		for range frames {
			f, err := r.ReadFrame()
			if err != nil {
				b.Fatal(err)
			}
			f.(*DataFrame).Data.Free()
		}
	}
}

func benchReadDataXnet(b *testing.B, n int) {
	wire, frames := dataWire(n)
	pool := bufpool.Default()
	fr := http2.NewFramer(nil, bufio.NewReaderSize(&loopReader{loop: wire}, defaultReadBufferSize))
	fr.SetReuseFrames()
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		for range frames {
			f, err := fr.ReadFrame()
			if err != nil {
				b.Fatal(err)
			}
			// The same ownership as ours: a pooled copy the caller keeps.
			pool.Copy(f.(*http2.DataFrame).Data()).Free()
		}
	}
}

func benchWriteDataLean(b *testing.B, n int) {
	pool := bufpool.Default()
	payload := pool.Get(n)
	defer payload.Free()
	w := NewWriter(&discardVec{}, WriterConfig{})
	defer w.Close()
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < n; off += MinMaxFrameSize {
			k := min(n-off, MinMaxFrameSize)
			w.WriteDataBuffer(1, off+k == n, payload, off, k)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

func benchWriteDataXnet(b *testing.B, n int) {
	payload := make([]byte, n)
	bw := bufio.NewWriterSize(&discardVec{}, minWriteBufferSize)
	fr := http2.NewFramer(bw, nil)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < n; off += MinMaxFrameSize {
			k := min(n-off, MinMaxFrameSize)
			if err := fr.WriteData(1, off+k == n, payload[off:off+k]); err != nil {
				b.Fatal(err)
			}
		}
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

// xnetRequestBlocks returns the first and a steady-state grpc-request
// header block as x/net's encoder (grpc-go's) produces them.
func xnetRequestBlocks() (first, steady []byte) {
	var hb bytes.Buffer
	enc := xhpack.NewEncoder(&hb)
	block := func() []byte {
		hb.Reset()
		for _, f := range grpcRequest {
			enc.WriteField(xhpack.HeaderField{Name: f.Name, Value: f.Value})
		}
		return bytes.Clone(hb.Bytes())
	}
	first = frameBytes(TypeHeaders, FlagEndHeaders, 1, block())
	steady = frameBytes(TypeHeaders, FlagEndHeaders, 1, block())
	return first, steady
}

func benchReadHeadersLean(b *testing.B) {
	needHPACK(b)
	first, steady := xnetRequestBlocks()
	r := NewReader(&loopReader{prefix: first, loop: steady}, ReaderConfig{})
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		f, err := r.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if len(f.(*HeadersFrame).Fields) != len(grpcRequest) {
			b.Fatal("fields lost")
		}
	}
}

func benchReadHeadersXnet(b *testing.B) {
	first, steady := xnetRequestBlocks()
	fr := http2.NewFramer(nil, bufio.NewReaderSize(&loopReader{prefix: first, loop: steady}, defaultReadBufferSize))
	fr.SetReuseFrames()
	fr.ReadMetaHeaders = xhpack.NewDecoder(4096, nil)
	b.ReportAllocs()
	for b.Loop() {
		f, err := fr.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if len(f.(*http2.MetaHeadersFrame).Fields) != len(grpcRequest) {
			b.Fatal("fields lost")
		}
	}
}

func benchWriteHeadersLean(b *testing.B) {
	needHPACK(b)
	w := NewWriter(&discardVec{}, WriterConfig{})
	defer w.Close()
	b.ReportAllocs()
	for b.Loop() {
		w.WriteHeaders(1, false, grpcRequest)
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

func benchWriteHeadersXnet(b *testing.B) {
	bw := bufio.NewWriterSize(&discardVec{}, minWriteBufferSize)
	fr := http2.NewFramer(bw, nil)
	var hb bytes.Buffer
	enc := xhpack.NewEncoder(&hb)
	b.ReportAllocs()
	for b.Loop() {
		hb.Reset()
		for _, f := range grpcRequest {
			enc.WriteField(xhpack.HeaderField{Name: f.Name, Value: f.Value})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			b.Fatal(err)
		}
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyVsIovec measures the WriteDataBuffer threshold: four DATA
// frames of each size per Flush, with the payload copied into the write
// buffer or passed as its own iovec, into an in-memory VectorWriter (user
// space cost only) and into a loopback TCP socket drained by a goroutine.
func BenchmarkCopyVsIovec(b *testing.B) {
	for _, sink := range []string{"mem", "tcp"} {
		for _, n := range []int{512, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10} {
			for _, mode := range []string{"copy", "iovec"} {
				b.Run(sink+"/"+strconv.Itoa(n)+"/"+mode, func(b *testing.B) {
					var dst io.Writer = &discardVec{}
					if sink == "tcp" {
						c, stop := loopbackConn(b)
						defer stop()
						dst = c
					}
					w := NewWriter(dst, WriterConfig{PeerMaxFrameSize: MaxMaxFrameSize})
					defer w.Close()
					if mode == "copy" {
						w.copyMin = 1 << 30
					} else {
						w.copyMin = 0
					}
					payload := bufpool.Default().Get(n)
					defer payload.Free()
					b.SetBytes(int64(4 * n))
					b.ReportAllocs()
					for b.Loop() {
						for range 4 {
							w.WriteDataBuffer(1, false, payload, 0, n)
						}
						if err := w.Flush(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// loopbackConn returns the client side of a loopback TCP connection whose
// server side a goroutine drains, and a function that closes both.
func loopbackConn(b *testing.B) (net.Conn, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	return c, func() {
		c.Close()
		<-done
		ln.Close()
	}
}
