package grpcwire

import (
	"context"
	"errors"
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
			return newStatusError(status.New(codes.Unavailable, msg), errors.Join(err, ErrConnClosed))
		case he.Unprocessed:
			return newStatusError(status.New(codes.Unavailable, "stream refused by the server: "+he.Code.String()), err)
		case he.Initiator == h2conn.InitiatorPeer:
			return newStatusError(RSTStatus(he.Code, deadlinePassed(ctx)), err)
		default:
			return newStatusError(status.Newf(RSTCode(he.Code, false), "stream error: %v", err), err)
		}
	}
	if errors.Is(err, h2conn.ErrGoingAway) {
		return newStatusError(status.New(codes.Unavailable, "connection is going away"), err)
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

// errConcurrentSend is what a SendMsg gets when another goroutine's SendMsg
// on the same stream has not returned (misuse: grpc-go documents SendMsg
// as unsafe to call from several goroutines at once). That message is not
// cut short; this one is not sent.
var errConcurrentSend = status.Error(codes.Internal, "leangrpc: SendMsg called while another SendMsg on the stream is in progress")
