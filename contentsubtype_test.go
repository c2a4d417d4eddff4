package leangrpc_test

import (
	"connectrpc.com/connect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leangrpc/leangrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonCodec is an old-style encoding.Codec (encoding.RegisterCodec)
// writing messages as protobuf JSON, counting its calls. Proto's decoder
// refuses its output, so a call that succeeds was decoded by it.
type jsonCodec struct {
	name  string
	calls atomic.Int32
}

func (c *jsonCodec) Name() string { return c.name }
func (c *jsonCodec) Marshal(v any) ([]byte, error) {
	c.calls.Add(1)
	return protojson.Marshal(v.(proto.Message))
}
func (c *jsonCodec) Unmarshal(b []byte, v any) error {
	c.calls.Add(1)
	return protojson.Unmarshal(b, v.(proto.Message))
}

// jsonCodecV2 is jsonCodec as an encoding.CodecV2.
type jsonCodecV2 struct{ jsonCodec }

func (c *jsonCodecV2) Marshal(v any) (mem.BufferSlice, error) {
	b, err := c.jsonCodec.Marshal(v)
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}
func (c *jsonCodecV2) Unmarshal(data mem.BufferSlice, v any) error {
	return c.jsonCodec.Unmarshal(data.Materialize(), v)
}

var (
	registeredJSON   = &jsonCodec{name: "testjson"}
	registeredJSONV2 = &jsonCodecV2{jsonCodec{name: "TestJSONv2"}} // registered lowercased
)

func init() {
	encoding.RegisterCodec(registeredJSON)
	encoding.RegisterCodecV2(registeredJSONV2)
}

// TestContentSubtypeCodecs runs the codec selection of grpc-go in the four
// pairings: a call's content-subtype (CallContentSubtype, a forced codec's
// name, a default call option) picks the registered codec, v1 or v2, on
// both ends; ForceServerCodec and ForceServerCodecV2 override the
// server's choice; an unknown subtype fails on the client with grpc-go's
// error and falls back to proto on the server.
func TestContentSubtypeCodecs(t *testing.T) {
	req := &testpb.SimpleRequest{ResponseSize: 100, Payload: payload(100), FillUsername: true}
	forAllPairs(t, func(t *testing.T, p pair) {
		tc := startTestService(t, p, stackOptions{})
		ctx := ctxT(t)

		// The registry picks the codec on both ends: 4 codec
		// calls per unary call.
		for _, tt := range []struct {
			subtype string
			codec   *jsonCodec
		}{
			{"testjson", registeredJSON},
			{"TestJSON", registeredJSON}, // CallContentSubtype lowercases
			{"testjsonv2", &registeredJSONV2.jsonCodec},
		} {
			before := tt.codec.calls.Load()
			var header metadata.MD
			reply, err := tc.UnaryCall(ctx, req, grpc.CallContentSubtype(tt.subtype), grpc.Header(&header))
			if err != nil || len(reply.GetPayload().GetBody()) != 100 {
				t.Fatalf("CallContentSubtype(%q): %v", tt.subtype, err)
			}
			// The response's content-type names the request's subtype.
			if ct, want := header.Get("content-type"), "application/grpc+"+strings.ToLower(tt.subtype); len(ct) != 1 || ct[0] != want {
				t.Errorf("CallContentSubtype(%q): response content-type %q, want %q", tt.subtype, ct, want)
			}
			if n := tt.codec.calls.Load() - before; n != 4 {
				t.Errorf("CallContentSubtype(%q): the registered codec ran %d times, want 4", tt.subtype, n)
			}
		}

		// A forced codec names the subtype (lowercased): the server
		// picks the registered codec of that name.
		forced := &jsonCodec{name: "TESTJSON"}
		before := registeredJSON.calls.Load()
		if _, err := tc.UnaryCall(ctx, req, grpc.ForceCodec(forced)); err != nil {
			t.Fatalf("ForceCodec: %v", err)
		}
		if forced.calls.Load() != 2 || registeredJSON.calls.Load()-before != 2 {
			t.Errorf("ForceCodec: client codec ran %d times, server's %d, want 2 and 2", forced.calls.Load(), registeredJSON.calls.Load()-before)
		}
		forcedV2 := &jsonCodecV2{jsonCodec{name: "testjsonV2"}}
		if _, err := tc.UnaryCall(ctx, req, grpc.ForceCodecV2(forcedV2)); err != nil || forcedV2.calls.Load() != 2 {
			t.Fatalf("ForceCodecV2: %v, %d client codec calls", err, forcedV2.calls.Load())
		}

		// A subtype nobody registered: grpc-go's client refuses the
		// call.
		_, err := tc.UnaryCall(ctx, req, grpc.CallContentSubtype("nosuch"))
		if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != "no codec registered for content-subtype nosuch" {
			t.Errorf("unknown subtype on the client: %v", err)
		}
		// grpc-go's server decodes it as proto: a proto codec under
		// an unregistered name gets through.
		unknown := &countingCodec{name: "unregistered"}
		if _, err := tc.UnaryCall(ctx, req, grpc.ForceCodecV2(unknown)); err != nil {
			t.Errorf("unknown subtype on the server: %v, want the proto fallback", err)
		}
		// And a JSON codec under an unregistered name does not.
		if _, err := tc.UnaryCall(ctx, req, grpc.ForceCodec(&jsonCodec{name: "otherjson"})); status.Code(err) != codes.Internal {
			t.Errorf("JSON under an unknown subtype: %v, want Internal from proto's decoder", err)
		}
	})
}

// TestDefaultCallOptionSubtype sets the content-subtype for every call of
// a client through its default call options.
func TestDefaultCallOptionSubtype(t *testing.T) {
	forAllPairs(t, func(t *testing.T, p pair) {
		tc := startTestService(t, p, stackOptions{
			leanDial: []leangrpc.DialOption{leangrpc.WithDefaultCallOptions(grpc.CallContentSubtype("testjson"))},
			grpcDial: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.CallContentSubtype("testjson"))},
		})
		before := registeredJSON.calls.Load()
		if _, err := tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
			t.Fatal(err)
		}
		if n := registeredJSON.calls.Load() - before; n != 4 {
			t.Errorf("the default subtype's codec ran %d times, want 4", n)
		}
	})
}

// TestForceServerCodec forces the server's codec: it decodes a request
// whatever the content-subtype says, here one nobody registered.
func TestForceServerCodec(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		name := "v1"
		if v2 {
			name = "v2"
		}
		t.Run(name, func(t *testing.T) {
			forAllPairs(t, func(t *testing.T, p pair) {
				serverCodec := &jsonCodecV2{jsonCodec{name: "serverjson"}}
				o := stackOptions{
					leanServer: []leangrpc.ServerOption{leangrpc.ForceServerCodec(&serverCodec.jsonCodec)},
					grpcServer: []grpc.ServerOption{grpc.ForceServerCodec(&serverCodec.jsonCodec)},
				}
				if v2 {
					o = stackOptions{
						leanServer: []leangrpc.ServerOption{leangrpc.ForceServerCodecV2(serverCodec)},
						grpcServer: []grpc.ServerOption{grpc.ForceServerCodecV2(serverCodec)},
					}
				}
				tc := startTestService(t, p, o)
				if _, err := tc.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 10}, grpc.ForceCodec(&jsonCodec{name: "otherjson"})); err != nil {
					t.Fatal(err)
				}
				if n := serverCodec.calls.Load(); n != 2 {
					t.Errorf("the server's forced codec ran %d times, want 2", n)
				}
			})
		})
	}
}

// TestServerJSONWithoutRegisteredCodec: a gRPC request of
// application/grpc+json is served with protobuf's JSON mapping when no
// codec named "json" is registered (grpc-go's server would decode it as
// proto and fail it), as the web protocols' JSON is.
func TestServerJSONWithoutRegisteredCodec(t *testing.T) {
	ws := startWeb(t)
	for _, addr := range []string{ws.own, ws.mounted} {
		client := connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](httpClient(true),
			"http://"+addr+"/grpc.testing.TestService/UnaryCall", connect.WithGRPC(), connect.WithProtoJSON())
		resp, err := client.CallUnary(ctxT(t), connect.NewRequest(&testpb.SimpleRequest{ResponseSize: 7}))
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if len(resp.Msg.GetPayload().GetBody()) != 7 {
			t.Fatalf("%s: %v", addr, resp.Msg)
		}
	}
}
