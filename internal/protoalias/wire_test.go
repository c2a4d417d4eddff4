package protoalias_test

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Hand encodings, for inputs whose field order, repetition or depth a
// marshaler would not produce.

// lenField encodes field num as a length-delimited value v.
func lenField(num protowire.Number, v []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// varintField encodes field num as the varint v.
func varintField(num protowire.Number, v uint64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// concat joins encodings: decoding the result merges them in order.
func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// filled returns n bytes of a pattern that starts at seed, so that two
// values of the same length differ.
func filled(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// chunkChain encodes a Chunk whose next field nests levels Chunks below
// it (the top-level message is level 0, the innermost one is level
// levels), the innermost holding data. It writes outside in, from the
// lengths of each level computed inside out, because wrapping level by
// level would copy the whole input once per level.
func chunkChain(levels int, data []byte) []byte {
	const dataField, nextField = 1, 2
	inner := lenField(dataField, data)
	sizes := make([]int, levels+1) // sizes[k]: encoded size of the Chunk at level k
	sizes[levels] = len(inner)
	for k := levels - 1; k >= 0; k-- {
		sizes[k] = protowire.SizeTag(nextField) + protowire.SizeBytes(sizes[k+1])
	}
	b := make([]byte, 0, sizes[0])
	for k := range levels {
		b = protowire.AppendTag(b, nextField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizes[k+1]))
	}
	return append(b, inner...)
}

// mustMarshal encodes m, which may miss required fields.
func mustMarshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{AllowPartial: true, Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
