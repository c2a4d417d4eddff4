package main

import (
	"context"
	"net"
	"sync/atomic"
)

// One client address can make only as many connections to the server's
// address as there are ephemeral ports, and makes them quickly only up to
// half of them (idle_limits.go, portsPerSource). Beyond that, the idle
// client spreads its connections over several loopback source addresses:
// Linux routes all of 127/8 to lo, so 127.0.0.2, 127.0.0.3, ... reach a
// server on 127.0.0.1 without any set-up, each with a port range of its
// own.

// netDialer opens a client's network connections, as
// grpc.WithContextDialer and leangrpc.WithContextDialer take it. A nil
// netDialer leaves each stack its own.
type netDialer func(ctx context.Context, addr string) (net.Conn, error)

// loopbackSources returns k loopback addresses from 127.0.0.1 on, counting
// across octets (127.0.0.255, 127.0.1.0, ...), or nil when k is at most 1:
// one source is the kernel's own choice.
func loopbackSources(k int) []net.IP {
	if k <= 1 {
		return nil
	}
	out := make([]net.IP, k)
	for i := range out {
		v := 1 + i // host part within 127/8
		out[i] = net.IPv4(127, byte(v>>16), byte(v>>8), byte(v))
	}
	return out
}

// spreadDialer returns a netDialer that binds each new connection to the
// next of sources in turn, so that no source makes more than its share;
// nil when there are no sources.
func spreadDialer(sources []net.IP) netDialer {
	if len(sources) == 0 {
		return nil
	}
	dialers := make([]net.Dialer, len(sources))
	for i, ip := range sources {
		dialers[i] = net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Control: bindAddressNoPort}
	}
	var next atomic.Uint64
	return func(ctx context.Context, addr string) (net.Conn, error) {
		d := &dialers[(next.Add(1)-1)%uint64(len(dialers))]
		return d.DialContext(ctx, "tcp", addr)
	}
}
