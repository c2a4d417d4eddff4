package grpcwire

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"math/rand"
	"runtime"
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// gzipped returns data compressed as a gzip member.
func gzipped(t testing.TB, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	z := gzip.NewWriter(&out)
	if _, err := z.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// expandCompressor writes every byte three times, so that its output
// outgrows the first buffer CompressBuffer takes for it.
type expandCompressor struct{}

func (expandCompressor) Name() string { return "leangrpc-test-expand" }
func (expandCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return expandWriter{w}, nil
}
func (expandCompressor) Decompress(r io.Reader) (io.Reader, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)/3)
	for i := 0; i+2 < len(b); i += 3 {
		out = append(out, b[i])
	}
	return bytes.NewReader(out), nil
}

type expandWriter struct{ w io.Writer }

func (e expandWriter) Write(p []byte) (int, error) {
	for _, c := range p {
		if _, err := e.w.Write([]byte{c, c, c}); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
func (expandWriter) Close() error { return nil }

func init() { encoding.RegisterCompressor(expandCompressor{}) }

// countingGzip is gzip whose decompressed output is counted, to see how
// much of a message the receiver inflated.
type countingGzip struct{ read *int64 }

func (countingGzip) Name() string { return "leangrpc-test-countinggzip" }
func (c countingGzip) Compress(w io.Writer) (io.WriteCloser, error) {
	return encoding.GetCompressor(grpcgzip.Name).Compress(w)
}
func (c countingGzip) Decompress(r io.Reader) (io.Reader, error) {
	z, err := encoding.GetCompressor(grpcgzip.Name).Decompress(r)
	if err != nil {
		return nil, err
	}
	return &countingReader{z, c.read}, nil
}

type countingReader struct {
	r io.Reader
	n *int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error {
	if cl, ok := c.r.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

var inflated int64

func init() { encoding.RegisterCompressor(countingGzip{&inflated}) }

// parseOne feeds wire to a Parser with the given encoding and returns its
// first message's bytes (or the error).
func parseOne(t *testing.T, pool *bufpool.Pool, enc string, maxRecv int, wire []byte) ([]byte, error) {
	t.Helper()
	p := Parser{Pool: pool, MaxRecv: maxRecv}
	p.SetEncoding(enc)
	defer p.Close()
	feed(&p, pool, wire, len(wire)/3+1, len(wire))
	m, ok, err := p.Next()
	if err != nil {
		return nil, err
	}
	if !ok {
		t.Fatal("no message")
	}
	defer m.Free()
	return m.Data.Materialize(), nil
}

func TestCompressBufferRoundTrip(t *testing.T) {
	pool := bufpool.New(nil)
	rnd := rand.New(rand.NewSource(1))
	random := make([]byte, 100<<10)
	rnd.Read(random)
	for _, tc := range []struct {
		name string
		enc  string
		data []byte
	}{
		{"gzip small", grpcgzip.Name, []byte("hello, hello, hello")},
		{"gzip 1 MiB of zeros", grpcgzip.Name, make([]byte, 1<<20)},
		{"gzip incompressible", grpcgzip.Name, random},
		{"output outgrows its buffer", "leangrpc-test-expand", bytes.Repeat([]byte("abc"), 5000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := pool.Get(PrefixLen + len(tc.data))
			PutPrefix(b.Bytes(), false, uint32(len(tc.data)))
			copy(b.Bytes()[PrefixLen:], tc.data)
			cb, err := CompressBuffer(pool, encoding.GetCompressor(tc.enc), b, 0)
			if err != nil {
				t.Fatal(err)
			}
			wire := bytes.Clone(cb.Bytes())
			cb.Free()
			if wire[0] != 1 || int(binary.BigEndian.Uint32(wire[1:])) != len(wire)-PrefixLen {
				t.Fatalf("prefix % x for %d payload bytes", wire[:PrefixLen], len(wire)-PrefixLen)
			}
			got, err := parseOne(t, pool, tc.enc, max(len(tc.data), len(wire)), wire)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Fatalf("round trip: %d bytes back for %d", len(got), len(tc.data))
			}
			if n := pool.Outstanding(); n != 0 {
				t.Errorf("%d buffers outstanding", n)
			}
		})
	}
}

func TestEncodeCompressed(t *testing.T) {
	pool := bufpool.New(nil)
	gz := encoding.GetCompressor(grpcgzip.Name)
	in := &grpc_testing.SimpleRequest{Payload: &grpc_testing.Payload{Body: make([]byte, 64<<10)}}
	// The send limit applies to the compressed size, as grpc-go's.
	b, sz, err := EncodeCompressed(pool, protoCodec, gz, in, 4<<10)
	if err != nil {
		t.Fatalf("64 KiB of zeros under a 4 KiB limit: %v", err)
	}
	// Stats handlers report both sizes: the payload's and the wire's.
	if sz.Len != proto.Size(in) || sz.Wire != b.Len()-PrefixLen || sz.Wire >= sz.Len {
		t.Errorf("sizes %+v for %d bytes encoded, %d on the wire", sz, proto.Size(in), b.Len()-PrefixLen)
	}
	var out grpc_testing.SimpleRequest
	p := Parser{Pool: pool}
	p.SetEncoding(grpcgzip.Name)
	p.Push(b)
	m, ok, err := p.Next()
	if !ok || err != nil || !m.Compressed {
		t.Fatal(ok, err, m.Compressed)
	}
	if got := m.size(); got != sz {
		t.Errorf("received sizes %+v, sent %+v", got, sz)
	}
	if err := DecodeMessage(protoCodec, m, &out, true); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, &out) {
		t.Error("round trip differs")
	}
	p.Close()
	random := make([]byte, 8<<10)
	rand.New(rand.NewSource(2)).Read(random)
	in.Payload.Body = random
	if _, _, err := EncodeCompressed(pool, protoCodec, gz, in, 4<<10); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("8 KiB incompressible under a 4 KiB limit: %v", err)
	}
	// An empty message goes uncompressed, flag unset, as grpc-go sends it.
	b, sz, err = EncodeCompressed(pool, protoCodec, gz, &grpc_testing.Empty{}, 0)
	if err != nil || b.Len() != PrefixLen || b.Bytes()[0] != 0 || sz != (MsgSize{}) {
		t.Errorf("empty message: %v % x", err, b.Bytes())
	}
	b.Free()
	if n := pool.Outstanding(); n != 0 {
		t.Errorf("%d buffers outstanding", n)
	}
}

// TestInflateErrors: the statuses grpc-go's receivers give.
func TestInflateErrors(t *testing.T) {
	pool := bufpool.New(nil)
	good := frame(true, gzipped(t, []byte("payload")))
	truncated := frame(true, gzipped(t, bytes.Repeat([]byte("payload"), 100))[:40])
	for _, tc := range []struct {
		name, enc string
		wire      []byte
		code      codes.Code
		msg       string
	}{
		{"no encoding", "", good, codes.Internal, "grpc: compressed flag set with identity or empty encoding"},
		{"identity", "identity", good, codes.Internal, "grpc: compressed flag set with identity or empty encoding"},
		{"unknown encoding", "x", good, codes.Internal, `grpc: Decompressor is not installed for grpc-encoding "x"`},
		{"not gzip", grpcgzip.Name, frame(true, []byte("plain text")), codes.Internal, "grpc: failed to decompress the message"},
		{"empty", grpcgzip.Name, frame(true, nil), codes.Internal, "grpc: failed to decompress the message"},
		{"truncated", grpcgzip.Name, truncated, codes.Internal, "grpc: failed to read decompressed data"},
		{"over the limit", grpcgzip.Name, frame(true, gzipped(t, make([]byte, 1001))), codes.ResourceExhausted,
			"grpc: received message after decompression larger than max 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseOne(t, pool, tc.enc, 1000, tc.wire)
			if st := status.Convert(err); st.Code() != tc.code || !strings.HasPrefix(st.Message(), tc.msg) {
				t.Errorf("got %v, want %v %q", err, tc.code, tc.msg)
			}
			if n := pool.Outstanding(); n != 0 {
				t.Errorf("%d buffers outstanding", n)
			}
		})
	}
	// A message of exactly the limit passes.
	if got, err := parseOne(t, pool, grpcgzip.Name, 1000, frame(true, gzipped(t, make([]byte, 1000)))); err != nil || len(got) != 1000 {
		t.Errorf("at the limit: %d bytes, %v", len(got), err)
	}
}

// gzipBomb returns a gzip stream of n members, each 1 MiB of zeros
// (about 1 KiB compressed): n MiB once inflated.
func gzipBomb(t testing.TB, n int) []byte {
	member := gzipped(t, make([]byte, 1<<20))
	return bytes.Repeat(member, n)
}

// TestInflateBombBounded: a message of ~1 MiB that inflates to 1 GiB is
// refused after at most limit+1 bytes of output, and the memory taken is
// about the limit, not the inflated size.
func TestInflateBombBounded(t *testing.T) {
	pool := bufpool.New(nil)
	const limit = 4 << 20
	wire := frame(true, gzipBomb(t, 1024))
	inflated = 0
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := parseOne(t, pool, "leangrpc-test-countinggzip", limit, wire)
	runtime.ReadMemStats(&after)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("got %v, want ResourceExhausted", err)
	}
	if inflated > limit+1 {
		t.Errorf("inflated %d bytes, want at most %d", inflated, limit+1)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
		t.Errorf("allocated %d MiB for a 1 GiB bomb", d>>20)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Errorf("%d buffers outstanding", n)
	}
}

func TestAcceptEncoding(t *testing.T) {
	if got := RegisteredCompressors(); !containsName(got, grpcgzip.Name) {
		t.Errorf("RegisteredCompressors() = %q, want gzip in it", got)
	}
	for _, tc := range []struct{ registered, send, want string }{
		{"gzip", "", "gzip"},
		{"gzip", "gzip", "gzip"},
		{"gzip", "identity", "gzip,identity"},
		{"", "x", "x"},
		{"gzip, zstd", "zstd", "gzip, zstd"},
	} {
		if got := AcceptEncoding(tc.registered, tc.send); got != tc.want {
			t.Errorf("AcceptEncoding(%q, %q) = %q, want %q", tc.registered, tc.send, got, tc.want)
		}
	}
	if got := SplitAcceptEncoding(" gzip , zstd"); len(got) != 2 || got[0] != "gzip" || got[1] != "zstd" {
		t.Errorf("SplitAcceptEncoding: %q", got)
	}
	if st := UnknownEncoding("x"); st.Code() != codes.Unimplemented || st.Message() != `grpc: Decompressor is not installed for grpc-encoding "x"` {
		t.Errorf("UnknownEncoding(x) = %v", st)
	}
	for _, known := range []string{"", "identity", grpcgzip.Name} {
		if st := UnknownEncoding(known); st != nil {
			t.Errorf("UnknownEncoding(%q) = %v", known, st)
		}
	}
}
