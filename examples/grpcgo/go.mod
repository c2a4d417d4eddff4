module github.com/leangrpc/leangrpc/examples/grpcgo

go 1.26.0

require (
	github.com/cncf/xds/go v0.0.0-20260202195803-dba9d589def2
	github.com/leangrpc/leangrpc v0.0.0
	google.golang.org/grpc v1.85.0
	google.golang.org/grpc/examples v0.0.0-20260825154716-030ee8becb20
)

require (
	github.com/envoyproxy/protoc-gen-validate v1.3.3 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/leangrpc/leangrpc => ../..
