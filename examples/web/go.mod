module github.com/leangrpc/leangrpc/examples/web

go 1.26.0

require (
	github.com/leangrpc/leangrpc v0.0.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1
	google.golang.org/grpc v1.85.0
	google.golang.org/grpc/examples v0.0.0-20260825154716-030ee8becb20
)

require (
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/leangrpc/leangrpc => ../..
