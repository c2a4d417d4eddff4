package leangrpc

// KeepaliveParamsUnfloored is KeepaliveParams without grpc-go's 1 s floor
// on the ping Time, so that tests of the server's keepalive timers can run
// in a fraction of a second.
var KeepaliveParamsUnfloored = keepaliveParams
