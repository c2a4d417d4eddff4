// Package sockio is leangrpc's socket I/O: reads that wait for readability
// without holding a buffer and take one from the pool only when bytes are
// there, vectored writes, and socket options.
package sockio

import (
	"net"
	"os"
	"strconv"
)

// TEMPORARY: signatures only; the implementation replaces this file.

// Wrap returns c ready for the frame layer. Where the platform and the
// connection allow it (Linux, a conn exposing syscall.RawConn) and pooled is
// true, the result also implements h2frame.ReadySource (ReadReady) and
// h2frame.VectorWriter (WriteVec); otherwise it returns c itself or a thin
// wrapper adding only WriteVec.
func Wrap(c net.Conn, pooled bool) net.Conn { return c }

// PooledReadsDefault reports whether pooled reads are on by default: true
// unless the environment sets LEANGRPC_READ_BUFFER_POOLING=false (the
// rollback switch).
func PooledReadsDefault() bool {
	v, ok := os.LookupEnv("LEANGRPC_READ_BUFFER_POOLING")
	if !ok {
		return true
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}
