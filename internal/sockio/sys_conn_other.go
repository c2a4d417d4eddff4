//go:build !linux || leangrpcportable

package sockio

import (
	"errors"
	"net"
)

// wrapRaw has no descriptor path here: every conn gets the FallbackConn.
func wrapRaw(c net.Conn, pooled bool) net.Conn { return nil }

// StartIdlePoller reports that there is no idle poller on the portable
// path: conns have no OnReadable, so an idle connection keeps its reader
// goroutine parked in Read.
func StartIdlePoller() error { return errors.ErrUnsupported }

// ForTLSHandshake returns raw: the portable path reads TLS with a reader
// goroutine (see the Linux version).
func ForTLSHandshake(raw net.Conn) net.Conn { return raw }

// SecuredTLS returns nil: there is no TLS-aware wait on the portable path.
func SecuredTLS(hs, c net.Conn) net.Conn { return nil }

// ForSniff returns nil: the portable path has no idle poller to wait in,
// and reads a connection's first bytes on a goroutine (see the Linux
// version).
func ForSniff(raw net.Conn) net.Conn { return nil }
