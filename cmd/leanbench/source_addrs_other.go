//go:build !linux

package main

import "syscall"

// bindAddressNoPort does nothing here: IP_BIND_ADDRESS_NO_PORT is Linux's.
// The port is then picked at bind, which still gives each source address
// its own range.
func bindAddressNoPort(network, address string, c syscall.RawConn) error { return nil }
