package grpcwire

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// CodecFor returns the codec registered for a content-subtype, as grpc-go
// looks it up at each call: the one registry of encoding.RegisterCodecV2
// and encoding.RegisterCodec (a name holds one or the other; an old-style
// Codec is bridged), "" meaning proto. A subtype nobody registered gives
// the proto codec with ok false: grpc-go's server decodes such a request
// as proto (and logs a warning), its client refuses the call. The
// registry is consulted each time, not cached, so that a codec a user
// registers under "proto" in an init function replaces grpc-go's on both
// roles, as it does in grpc-go; the common case is one map lookup.
//
// subtype is looked up as it is: grpc-go lowercases names when they are
// registered and when a client call option sets them, but takes a
// request's content-type as it arrives.
func CodecFor(subtype string) (c encoding.CodecV2, ok bool) {
	if subtype == "" {
		subtype = "proto"
	}
	if c := encoding.GetCodecV2(subtype); c != nil {
		return c, true
	}
	if c := encoding.GetCodec(subtype); c != nil {
		return V1Codec(c), true
	}
	if subtype != "proto" {
		if c, ok := CodecFor("proto"); ok {
			return c, false
		}
	}
	return protoCodec, false
}

// bytesCodec is the shape of the old codec interfaces, encoding.Codec and
// grpc-go's deprecated grpc.Codec: whole messages as byte slices.
type bytesCodec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// V1Codec runs an encoding.Codec (the interface of encoding.RegisterCodec
// and grpc.ForceCodec) as a CodecV2. Its Marshal output is used as it is
// (one slice, copied once behind the message prefix); Unmarshal gets the
// message as one contiguous slice, which the codec may keep: it is a copy
// of the received bytes.
func V1Codec(c encoding.Codec) encoding.CodecV2 { return &bridgedCodec{c: c, name: c.Name()} }

// BytesCodec is V1Codec for a codec that names itself otherwise (grpc-go's
// deprecated grpc.Codec has String instead of Name).
func BytesCodec(c bytesCodec, name string) encoding.CodecV2 {
	return &bridgedCodec{c: c, name: name}
}

type bridgedCodec struct {
	c    bytesCodec
	name string
}

func (b *bridgedCodec) Name() string { return b.name }

func (b *bridgedCodec) Marshal(v any) (mem.BufferSlice, error) {
	data, err := b.c.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(data)}, nil
}

func (b *bridgedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return b.c.Unmarshal(data.Materialize(), v)
}
