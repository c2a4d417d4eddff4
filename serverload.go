package leangrpc

import (
	"sync"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// A call's server load, as a balancer's PickResult.Done hears it
// (balancer.DoneInfo.ServerLoad): the ORCA load report a server sends in
// the endpoint-load-metrics-bin trailer (gRFC A51). grpc-go parses it with
// a parser that its orca package installs through an internal package;
// leangrpc finds the report's message type in the protobuf registry
// instead, where it is whenever the program links grpc-go's orca package,
// so that a balancer written for grpc-go (its examples/features/orca
// client) hears the same report on either stack.

// orcaTrailer is the trailer that carries a call's load report.
const orcaTrailer = "endpoint-load-metrics-bin"

// orcaReportName is the load report's message type.
const orcaReportName = "xds.data.orca.v3.OrcaLoadReport"

// orcaReportType returns the load report's message type, or nil when the
// program does not link it. Looked up once, after every package's init
// has registered its types.
var orcaReportType = sync.OnceValue(func() protoreflect.MessageType {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(orcaReportName)
	if err != nil {
		return nil
	}
	return mt
})

// serverLoad returns what grpc-go puts in DoneInfo.ServerLoad for a call
// that ended with trailer: nil without the report's type; with it, the
// report, or a nil report of its type when the trailer has none or not
// one that parses (grpc-go's orca parser returns its typed nil then, which
// its example's Done callback relies on).
func serverLoad(trailer metadata.MD) any {
	mt := orcaReportType()
	if mt == nil {
		return nil
	}
	if vs := trailer.Get(orcaTrailer); len(vs) == 1 {
		m := mt.New().Interface()
		if proto.Unmarshal([]byte(vs[0]), m) == nil {
			return m
		}
	}
	return mt.Zero().Interface()
}
