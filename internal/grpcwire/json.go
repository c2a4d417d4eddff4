package grpcwire

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// JSONCodec is the "json" codec a server uses when grpc-go's registry has
// none of that name, for gRPC (application/grpc+json) as for the web
// protocols: protobuf's canonical JSON mapping, unknown fields ignored on
// input as the Connect protocol asks. A codec registered as "json" wins,
// as any registered codec does. (grpc-go's server decodes such requests
// as proto, and fails them.)
var JSONCodec encoding.CodecV2 = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("json codec: %T is not a proto.Message", v)
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (jsonCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("json codec: %T is not a proto.Message", v)
	}
	b := data.Materialize()
	if len(b) == 0 {
		b = []byte("{}") // an empty body is the empty message
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}
