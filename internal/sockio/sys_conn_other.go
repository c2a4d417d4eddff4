//go:build !linux

package sockio

import "net"

// wrapRaw has no descriptor path outside Linux: every conn gets the
// FallbackConn.
func wrapRaw(c net.Conn, pooled bool) net.Conn { return nil }

// SetRcvLowat does nothing outside Linux.
func SetRcvLowat(c net.Conn, n int) error { return nil }

// StartIdlePoller does nothing outside Linux: there is no idle poller (conns
// have no OnReadable).
func StartIdlePoller() error { return nil }
