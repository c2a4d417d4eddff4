package leangrpc

import (
	"reflect"

	"google.golang.org/grpc"
	"google.golang.org/grpc/serviceconfig"
)

// A resolver may hand the channel a service config that grpc-go's own
// parser made (a *grpc.ServiceConfig): grpc-go's customloadbalancer example
// does, through an internal grpc-go package. grpc-go keeps the JSON such a
// config came from in an unexported field; leangrpc reads it and parses
// it again with its own parser, which accepts what grpc-go's accepts.
// TestGrpcGoServiceConfigJSON fails, naming the grpc-go version, if an
// upgrade moves that field.

// grpcGoConfigField is the field of grpc.ServiceConfig holding its JSON.
const grpcGoConfigField = "rawJSONString"

// grpcGoConfigJSON returns the JSON a grpc-go service config was parsed
// from, and false when c is not one or the field is not where it was.
func grpcGoConfigJSON(c serviceconfig.Config) (string, bool) {
	gc, ok := c.(*grpc.ServiceConfig)
	if !ok || gc == nil {
		return "", false
	}
	f := reflect.ValueOf(gc).Elem().FieldByName(grpcGoConfigField)
	if !f.IsValid() || f.Kind() != reflect.String {
		return "", false
	}
	return f.String(), true
}

// ownConfig returns a resolver's service config as leangrpc's: as it is
// when leangrpc's parser made it, parsed again from its JSON when
// grpc-go's did.
// ok is false for a config of any other kind.
func (cc *ClientConn) ownConfig(c serviceconfig.Config) (sc *serviceConfig, ok bool, err error) {
	if sc, ok := c.(*serviceConfig); ok {
		return sc, true, nil
	}
	js, ok := grpcGoConfigJSON(c)
	if !ok {
		return nil, false, nil
	}
	sc, err = parseServiceConfig(js, int(cc.opts.maxCallAttempts))
	return sc, true, err
}
