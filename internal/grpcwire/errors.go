package grpcwire

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// StreamStatusError converts an error returned by an h2conn stream method
// into the status error a gRPC caller sees. ctx is the call's context: a
// reset we made because it ended reports its error (Canceled or
// DeadlineExceeded), and a peer's CANCEL after our deadline passed reports
// DeadlineExceeded.
func StreamStatusError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if err == h2conn.ErrConcurrentWrite {
		return errConcurrentSend
	}
	if ctx != nil && ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	var hl *h2conn.HeaderListTooLargeError
	if errors.As(err, &hl) {
		// A client's request headers over the server's limit: nothing
		// was sent. (The server side answers otherwise, see
		// ServerStream.headerListErr.)
		return &statusError{st: status.Newf(codes.Internal, "header list size to send violates the maximum size (%d bytes) set by server", hl.Limit), cause: err}
	}
	var he *h2conn.Error
	if errors.As(err, &he) {
		switch {
		case he.StreamID == 0:
			msg := "connection closed"
			if he.Initiator == h2conn.InitiatorPeer && he.Code != 0 {
				msg = "connection closed by peer: " + he.Code.String()
			}
			if he.Reason != "" {
				msg += ": " + he.Reason
			}
			if causeWorthShowing(he.Cause) {
				// A TLS alert (a certificate the peer refused) or a
				// reset says why; a plain end of stream says nothing.
				msg += ": " + he.Cause.Error()
			}
			return &statusError{st: status.New(codes.Unavailable, msg), cause: errors.Join(err, ErrConnClosed)}
		case he.Unprocessed:
			return &statusError{st: status.New(codes.Unavailable, "stream refused by the server: "+he.Code.String()), cause: err}
		case he.Initiator == h2conn.InitiatorPeer:
			return &statusError{st: RSTStatus(he.Code, deadlinePassed(ctx)), cause: err}
		default:
			return &statusError{st: status.Newf(RSTCode(he.Code, false), "stream error: %v", err), cause: err}
		}
	}
	if errors.Is(err, h2conn.ErrGoingAway) {
		return &statusError{st: status.New(codes.Unavailable, "connection is going away"), cause: err}
	}
	return ToStatusError(err)
}

func deadlinePassed(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// causeWorthShowing reports whether the I/O error that ended a connection
// tells the caller more than "connection closed".
func causeWorthShowing(err error) bool {
	return err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed)
}
