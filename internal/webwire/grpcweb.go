package webwire

import (
	"encoding/base64"
	"errors"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// Flags of a length-prefixed frame beyond gRPC's compressed bit.
const (
	flagCompressed = 0x01
	// flagTrailers marks gRPC-Web's final frame: the trailers as an
	// HTTP/1 header block.
	flagTrailers = 0x80
	// flagEndStream marks the Connect protocol's final frame: the
	// end-of-stream JSON.
	flagEndStream = 0x02
)

// frame returns payload behind a 5-byte prefix with flags.
func frame(pool *bufpool.Pool, flags byte, payload []byte) *bufpool.Buffer {
	b := pool.Get(5 + len(payload))
	p := b.Bytes()[:5+len(payload)]
	p[0] = flags
	n := len(payload)
	p[1], p[2], p[3], p[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	copy(p[5:], payload)
	b.SetLen(len(p))
	return b
}

// trailerFrame is gRPC-Web's final frame: the trailer fields, names in
// lower case, as "name: value\r\n" lines.
func trailerFrame(pool *bufpool.Pool, trailers []hpack.HeaderField) *bufpool.Buffer {
	n := 0
	for _, f := range trailers {
		if f.Name == ":status" || f.Name == "content-type" {
			continue
		}
		n += len(f.Name) + 2 + len(f.Value) + 2
	}
	block := make([]byte, 0, n)
	for _, f := range trailers {
		if f.Name == ":status" || f.Name == "content-type" {
			continue
		}
		block = append(block, f.Name...)
		block = append(block, ": "...)
		block = append(block, f.Value...)
		block = append(block, "\r\n"...)
	}
	return frame(pool, flagTrailers, block)
}

// encodeText replaces b (owned) by its base64 form, as gRPC-Web's text
// protocol sends each frame.
func encodeText(pool *bufpool.Pool, b *bufpool.Buffer) *bufpool.Buffer {
	n := base64.StdEncoding.EncodedLen(b.Len())
	out := pool.Get(n)
	base64.StdEncoding.Encode(out.Bytes()[:n], b.Bytes())
	out.SetLen(n)
	b.Free()
	return out
}

// textDecoder decodes a gRPC-Web text request body, which arrives as
// base64 in pieces of any size; a client may pad each message's base64 on
// its own, so padding may come in the middle of the body.
type textDecoder struct {
	carry [4]byte // a quantum begun in the previous piece
	n     int
}

var errBadBase64 = errors.New("malformed base64 in a grpc-web-text body")

// decode returns in's bytes decoded (a new buffer, nil when no whole
// quantum came); in is freed.
func (d *textDecoder) decode(pool *bufpool.Pool, in *bufpool.Buffer) (*bufpool.Buffer, error) {
	src := in.Bytes()
	out := pool.Get((d.n + len(src) + 3) / 4 * 3)
	dst := out.Bytes()[:0]
	var err error
	for _, c := range src {
		switch c {
		case '\r', '\n', ' ', '\t':
			continue
		}
		d.carry[d.n] = c
		d.n++
		if d.n < 4 {
			continue
		}
		d.n = 0
		var q [3]byte
		k, e := base64.StdEncoding.Decode(q[:], d.carry[:])
		if e != nil {
			err = errBadBase64
			break
		}
		dst = append(dst, q[:k]...)
	}
	in.Free()
	if err != nil || len(dst) == 0 {
		out.Free()
		return nil, err
	}
	out.SetLen(len(dst))
	return out, nil
}

// finish reports an error when the body ended inside a quantum.
func (d *textDecoder) finish() error {
	if d.n != 0 {
		return errBadBase64
	}
	return nil
}

// prefixOnly is a message prefix with flags and length n and nothing
// behind it.
func prefixOnly(pool *bufpool.Pool, flags byte, n int) *bufpool.Buffer {
	b := frame(pool, flags, nil)
	p := b.Bytes()
	p[1], p[2], p[3], p[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return b
}
