package grpcwire

import (
	"os"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/leangrpc/leangrpc/internal/protoalias"
)

// AliasMinField is the length from which a received message's bytes
// fields alias the buffer the message was gathered in, rather than being
// copied out of it by protobuf-go: protoalias.DefaultMinField.
const AliasMinField = protoalias.DefaultMinField

// unsafeUnmarshaler is a message that vtprotobuf generated with its
// unsafe unmarshal, whose bytes fields (and strings) alias its input.
type unsafeUnmarshaler interface {
	UnmarshalVTUnsafe([]byte) error
}

// decodeAliased decodes a gathered message m into dst, as grpc-go's proto
// codec would, with large bytes fields aliasing m's buffer. When any does,
// the buffer leaves the pool (bufpool.Buffer.Detach): it is never reused
// or written again, and the garbage collector frees it once neither the
// decoded message nor any field of it is referenced. It reports false,
// having taken nothing, when dst is no message it can decode so.
func decodeAliased(m Message, dst any) (done bool, err error) {
	if len(m.Data) != 1 || m.Data[0].Len() < AliasMinField || !m.gathered.Detachable() {
		return false, nil
	}
	pm, ok := dst.(proto.Message)
	if !ok {
		return false, nil
	}
	b := m.Data[0].ReadOnlyData()
	var aliased bool
	if vt, ok := dst.(unsafeUnmarshaler); ok {
		proto.Reset(pm) // as grpc-go's codec does: vtprotobuf's merges
		err, aliased = vt.UnmarshalVTUnsafe(b), true
	} else {
		aliased, err = protoalias.Unmarshal(b, pm, AliasMinField)
	}
	if aliased {
		m.gathered.Detach()
	}
	m.Free()
	if err != nil {
		return true, unmarshalError(err)
	}
	return true, nil
}

// AliasBytesDefault reports whether aliasing receive is on by default:
// true unless the environment sets LEANGRPC_ALIAS_BYTES to 0 or false (the
// rollback switch).
func AliasBytesDefault() bool {
	v, ok := os.LookupEnv("LEANGRPC_ALIAS_BYTES")
	if !ok {
		return true
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}
