package leangrpc

import (
	"time"

	"google.golang.org/grpc/keepalive"
)

// KeepaliveParamsUnfloored is KeepaliveParams without grpc-go's 1 s floor
// on the ping Time, so that tests of the server's keepalive timers can run
// in a fraction of a second.
var KeepaliveParamsUnfloored = keepaliveParams

// WithKeepaliveParamsUnfloored is WithKeepaliveParams without grpc-go's
// 10 s floor on the ping Time, so that a test can make a server answer a
// client's pings with GOAWAY too_many_pings in a fraction of a second.
func WithKeepaliveParamsUnfloored(kp keepalive.ClientParameters) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.kp = kp })
}

// KeepaliveTimeOf is the keepalive time cc's next connection will use.
func KeepaliveTimeOf(cc *ClientConn) time.Duration { return cc.h2cfg.Load().KeepaliveTime }
