package leangrpc

import (
	"testing"
	"unsafe"
)

// An idle channel keeps its ClientConn and its SubConn for as long as it
// lives, thousands of them in a process that holds many channels. The
// bounds are the size classes the structs fit today: a field that
// pushes one into the next class costs every idle channel its rounding.
func TestIdleChannelStructSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		size, max uintptr
	}{
		{"ClientConn", unsafe.Sizeof(ClientConn{}), 448},
		{"channelOptions", unsafe.Sizeof(channelOptions{}), 128},
		{"subConn", unsafe.Sizeof(subConn{}), 160},
		{"pickerGen", unsafe.Sizeof(pickerGen{}), 32},
	} {
		if c.size > c.max {
			t.Errorf("%s is %d bytes, over %d", c.name, c.size, c.max)
		}
	}
}
