package grpcwire

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStatusErrorsDoNotMatchEOF: a connection the peer closed (the read
// ended with io.EOF) becomes an Unavailable status error that still matches
// net.ErrClosed and yields the engine error, but never io.EOF, which
// callers read as the clean end of a stream.
func TestStatusErrorsDoNotMatchEOF(t *testing.T) {
	connEOF := &h2conn.Error{Initiator: h2conn.InitiatorPeer, Reason: "eof", Cause: io.EOF}
	for name, err := range map[string]error{
		"StreamStatusError":     StreamStatusError(nil, connEOF),
		"ToStatusError":         ToStatusError(fmt.Errorf("read: %w", io.EOF)),
		"ToStatusError(closed)": ToStatusError(connEOF),
	} {
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want code Unavailable", name, err)
		}
		if errors.Is(err, io.EOF) {
			t.Errorf("%s: %v matches io.EOF", name, err)
		}
	}
	err := StreamStatusError(nil, connEOF)
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("%v does not match net.ErrClosed", err)
	}
	var he *h2conn.Error
	if !errors.As(err, &he) || he != connEOF {
		t.Errorf("errors.As(%v) = %v, want the engine error", err, he)
	}
}
