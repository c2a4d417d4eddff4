package leangrpc

import "google.golang.org/grpc/grpclog"

// logger logs what grpc-go logs, through grpclog, so that the same
// settings (GRPC_GO_LOG_SEVERITY_LEVEL, grpclog.SetLoggerV2) govern it.
var logger = grpclog.Component("leangrpc")
