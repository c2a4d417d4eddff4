package grpcwire

import (
	"github.com/leangrpc/leangrpc/internal/bufpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the default codec
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// protoCodec is grpc-go's registered proto codec as it was at start-up. When
// a call uses it and the message is a proto.Message, EncodeBuffer marshals
// straight into the pooled buffer that goes to the wire; a codec a user
// registered later under the same name is called through its interface.
var protoCodec = encoding.GetCodecV2("proto")

// EncodeBuffer marshals msg into one pooled buffer holding the 5-byte
// prefix and the payload, ready for h2conn.DataItem. It returns an
// owned buffer. With grpc-go's proto codec the message is marshaled in place
// (no copy); with another codec its output is copied once behind the
// prefix. A payload over maxSend (0: unlimited) is ResourceExhausted.
//
// A nil msg (an untyped nil) is an empty message whatever the codec, which
// is not asked: grpc-go sends it so (a typed nil proto message is empty
// too, through the codec).
func EncodeBuffer(pool *bufpool.Pool, codec encoding.CodecV2, msg any, maxSend int) (*bufpool.Buffer, error) {
	b, _, err := encode(pool, codec, msg, maxSend, false)
	return b, err
}

// encodeForWire is EncodeBuffer for a sender that can write a message in
// pieces (pieces.go): a large proto message may come back as pieces, with
// a nil buffer.
func encodeForWire(pool *bufpool.Pool, codec encoding.CodecV2, msg any, maxSend int) (*bufpool.Buffer, *pieces, error) {
	return encode(pool, codec, msg, maxSend, true)
}

func encode(pool *bufpool.Pool, codec encoding.CodecV2, msg any, maxSend int, inPieces bool) (*bufpool.Buffer, *pieces, error) {
	if msg == nil {
		b := pool.Get(PrefixLen)
		PutPrefix(b.Bytes(), false, 0)
		return b, nil, nil
	}
	if maxSend <= 0 {
		maxSend = DefaultMaxSendMsgSize
	}
	if codec == protoCodec {
		if m, ok := msg.(proto.Message); ok {
			size := proto.Size(m)
			if size > maxSend {
				return nil, nil, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", size, maxSend)
			}
			if inPieces && size >= piecesMin {
				if p := marshalPieces(pool, m, size, referenceMin, firstPieceData); p != nil {
					return nil, p, nil
				}
			}
			b := pool.Get(PrefixLen + size)
			buf := b.Bytes()
			out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf[PrefixLen:PrefixLen], m)
			if err != nil {
				b.Free()
				return nil, nil, status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
			}
			if len(out) != size || (size > 0 && &out[0] != &buf[PrefixLen]) {
				// The message changed between Size and Marshal; fall
				// back to a copy of what was marshaled.
				b.Free()
				if len(out) > maxSend {
					return nil, nil, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", len(out), maxSend)
				}
				b = pool.Get(PrefixLen + len(out))
				copy(b.Bytes()[PrefixLen:], out)
			}
			PutPrefix(b.Bytes(), false, uint32(b.Len()-PrefixLen))
			return b, nil, nil
		}
	}
	if codec == nil {
		return nil, nil, status.Error(codes.Internal, "grpc: no codec")
	}
	pre, data, err := EncodeMessage(codec, msg, maxSend)
	if err != nil {
		return nil, nil, err
	}
	b := pool.Get(PrefixLen + data.Len())
	copy(b.Bytes(), pre[:])
	data.CopyTo(b.Bytes()[PrefixLen:])
	data.Free()
	return b, nil, nil
}
