package leangrpc

import (
	"testing"
	"unsafe"
)

// TestRPCSize pins a call's server state, allocated once per call, to the
// 768-byte size class: the garbage collector's work is a visible part of a
// single call's CPU (leanbench unary ×1: 6.6% less CPU with GOGC=400).
func TestRPCSize(t *testing.T) {
	if n := unsafe.Sizeof(rpc{}); n > 768 {
		t.Errorf("rpc is %d bytes, want at most 768", n)
	}
}
