package grpcgo

// The example programs are built in a temporary module whose go.mod and
// go.sum are this module's; these imports keep in go.sum every module the
// programs import (go mod tidy would otherwise drop them).
import (
	_ "github.com/cncf/xds/go/xds/data/orca/v3"
	_ "github.com/leangrpc/leangrpc"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/channelz/service"
	_ "google.golang.org/grpc/examples/features/customloadbalancer/client/customroundrobin"
	_ "google.golang.org/grpc/examples/features/proto/echo"
	_ "google.golang.org/grpc/examples/helloworld/helloworld"
	_ "google.golang.org/grpc/health"
	_ "google.golang.org/grpc/keepalive"
	_ "google.golang.org/grpc/orca"
	_ "google.golang.org/grpc/resolver/manual"
)
