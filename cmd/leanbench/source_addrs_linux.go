package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// bindAddressNoPort sets IP_BIND_ADDRESS_NO_PORT on a socket about to be
// bound to a source address: the kernel then picks its port at connect,
// unique for the four-tuple, instead of at bind, where a port must be
// free toward every destination and each address would get the range
// once for all servers rather than once per server.
func bindAddressNoPort(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
