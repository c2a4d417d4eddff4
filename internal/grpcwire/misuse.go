package grpcwire

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errConcurrentSend is what a SendMsg gets when another goroutine's SendMsg
// on the same stream has not returned (misuse: grpc-go documents SendMsg
// as unsafe to call from several goroutines at once). That message is not
// cut short; this one is not sent.
var errConcurrentSend = status.Error(codes.Internal, "leangrpc: SendMsg called while another SendMsg on the stream is in progress")
