package leangrpc

import (
	"context"

	"google.golang.org/grpc"
)

// Compression uses grpc-go's compressor registry: import
// google.golang.org/grpc/encoding/gzip (or register any
// encoding.Compressor) and call with grpc.UseCompressor, as with grpc-go.
// A server decompresses requests in their grpc-encoding and compresses its
// responses with the same compressor; a handler may choose another with
// SetSendCompressor. grpc-go's grpc.SetSendCompressor and
// grpc.ClientSupportedCompressors accept only grpc-go's own server stream,
// so handlers served by leangrpc call the functions of the same name here,
// which behave as grpc-go's (and on a grpc-go server call grpc-go's).

// SetSendCompressor sets the compressor of the response messages of the
// call whose handler got ctx, as grpc.SetSendCompressor: the compressor
// must be registered (encoding.RegisterCompressor) and among those the
// client advertised (see ClientSupportedCompressors); encoding.Identity
// turns compression off. It must be called before the response headers
// are sent, and not concurrently with SendHeader or SendMsg. On a context
// of grpc-go's server it calls grpc.SetSendCompressor.
func SetSendCompressor(ctx context.Context, name string) error {
	ts, ok := grpc.ServerTransportStreamFromContext(ctx).(*transportStream)
	if !ok || ts == nil {
		return grpc.SetSendCompressor(ctx, name)
	}
	return ts.ss.SetSendCompressor(name)
}

// ClientSupportedCompressors returns the compressor names the client
// advertised in grpc-accept-encoding, as grpc.ClientSupportedCompressors.
// On a context of grpc-go's server it calls grpc.ClientSupportedCompressors.
func ClientSupportedCompressors(ctx context.Context) ([]string, error) {
	ts, ok := grpc.ServerTransportStreamFromContext(ctx).(*transportStream)
	if !ok || ts == nil {
		return grpc.ClientSupportedCompressors(ctx)
	}
	return ts.ss.ClientSupportedCompressors(), nil
}
