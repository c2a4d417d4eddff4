package main

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"time"

	v1 "github.com/leangrpc/leangrpc/interop/conformance/internal/conformancev1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// conformanceService is the ConformanceService the suite's reference
// client calls: an ordinary grpc-go service, which leangrpc serves over
// gRPC, gRPC-Web and the Connect protocol alike. Each method answers as
// its request's response definition tells it (headers, trailers, data,
// an error, a delay) and echoes what it received (headers, timeout,
// requests) so that the runner can check what crossed the wire.
// Unimplemented is left to the embedded Unimplemented server on purpose:
// the suite checks the Unimplemented code that yields.
type conformanceService struct {
	v1.UnimplementedConformanceServiceServer
}

func (conformanceService) Unary(ctx context.Context, req *v1.UnaryRequest) (*v1.UnaryResponse, error) {
	p, err := unary(ctx, req.GetResponseDefinition(), []proto.Message{req})
	if err != nil {
		return nil, err
	}
	return &v1.UnaryResponse{Payload: p}, nil
}

func (conformanceService) IdempotentUnary(ctx context.Context, req *v1.IdempotentUnaryRequest) (*v1.IdempotentUnaryResponse, error) {
	p, err := unary(ctx, req.GetResponseDefinition(), []proto.Message{req})
	if err != nil {
		return nil, err
	}
	return &v1.IdempotentUnaryResponse{Payload: p}, nil
}

func (conformanceService) ClientStream(stream grpc.ClientStreamingServer[v1.ClientStreamRequest, v1.ClientStreamResponse]) error {
	var def *v1.UnaryResponseDefinition
	var reqs []proto.Message
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if len(reqs) == 0 {
			// Only the first request's definition counts.
			def = req.GetResponseDefinition()
		}
		reqs = append(reqs, req)
	}
	p, err := unary(stream.Context(), def, reqs)
	if err != nil {
		return err
	}
	return stream.SendAndClose(&v1.ClientStreamResponse{Payload: p})
}

// unary answers a call with one response (Unary, IdempotentUnary,
// ClientStream) once all its requests are in.
func unary(ctx context.Context, def *v1.UnaryResponseDefinition, reqs []proto.Message) (*v1.ConformancePayload, error) {
	info, err := requestInfo(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if def == nil {
		// No definition: no headers, trailers or data, only the echo.
		return &v1.ConformancePayload{RequestInfo: info}, nil
	}
	if err := grpc.SendHeader(ctx, toMD(def.GetResponseHeaders())); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, toMD(def.GetResponseTrailers())); err != nil {
		return nil, err
	}
	if err := sleepMs(ctx, def.GetResponseDelayMs()); err != nil {
		return nil, err
	}
	if e := def.GetError(); e != nil {
		return nil, toStatus(e, info)
	}
	return &v1.ConformancePayload{Data: def.GetResponseData(), RequestInfo: info}, nil
}

func (conformanceService) ServerStream(req *v1.ServerStreamRequest, stream grpc.ServerStreamingServer[v1.ServerStreamResponse]) error {
	ctx := stream.Context()
	def := req.GetResponseDefinition()
	if def == nil {
		return nil
	}
	info, err := requestInfo(ctx, []proto.Message{req})
	if err != nil {
		return err
	}
	// Headers go at once, so that the client sees them before any delay.
	if err := stream.SendHeader(toMD(def.GetResponseHeaders())); err != nil {
		return err
	}
	stream.SetTrailer(toMD(def.GetResponseTrailers()))
	sent := 0
	for _, data := range def.GetResponseData() {
		p := &v1.ConformancePayload{Data: data}
		if sent == 0 {
			p.RequestInfo = info // the echo rides on the first response only
		}
		if err := sleepMs(ctx, def.GetResponseDelayMs()); err != nil {
			return err
		}
		if err := stream.Send(&v1.ServerStreamResponse{Payload: p}); err != nil {
			return err
		}
		sent++
	}
	if e := def.GetError(); e != nil {
		if sent > 0 {
			info = nil // echoed already
		}
		return toStatus(e, info)
	}
	return nil
}

func (conformanceService) BidiStream(stream grpc.BidiStreamingServer[v1.BidiStreamRequest, v1.BidiStreamResponse]) error {
	ctx := stream.Context()
	var def *v1.StreamResponseDefinition
	var fullDuplex bool
	var reqs []proto.Message // since the last response sent
	first := true
	sent := 0
	// send sends the next response of the definition, with the echo of the
	// requests since the last one: all of the call's on the first response
	// (with headers and timeout), only the new ones after (full duplex).
	send := func() error {
		p := &v1.ConformancePayload{Data: def.GetResponseData()[sent]}
		if sent == 0 {
			info, err := requestInfo(ctx, reqs)
			if err != nil {
				return err
			}
			p.RequestInfo = info
		} else if fullDuplex {
			anys, err := asAnys(reqs)
			if err != nil {
				return err
			}
			p.RequestInfo = &v1.ConformancePayload_RequestInfo{Requests: anys}
		}
		if err := sleepMs(ctx, def.GetResponseDelayMs()); err != nil {
			return err
		}
		if err := stream.Send(&v1.BidiStreamResponse{Payload: p}); err != nil {
			return err
		}
		sent++
		reqs = nil
		return nil
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		reqs = append(reqs, req)
		if first {
			first = false
			def, fullDuplex = req.GetResponseDefinition(), req.GetFullDuplex()
			if def != nil {
				md := toMD(def.GetResponseHeaders())
				if fullDuplex {
					// The client waits for headers before its next send.
					err = stream.SendHeader(md)
				} else {
					// Half duplex writes nothing until the client is done
					// sending: over HTTP/1.1 a response begun early may end
					// the reading of the request.
					err = stream.SetHeader(md)
				}
				if err != nil {
					return err
				}
				stream.SetTrailer(toMD(def.GetResponseTrailers()))
			}
		}
		if !fullDuplex {
			continue
		}
		if sent >= len(def.GetResponseData()) {
			// Nothing left to answer with: end with the error, if any.
			break
		}
		if err := send(); err != nil {
			return err
		}
	}
	// Half duplex sends all its responses now; full duplex those left
	// over when the client sent fewer requests than there are responses.
	for sent < len(def.GetResponseData()) {
		if err := send(); err != nil {
			return err
		}
	}
	if e := def.GetError(); e != nil {
		var info *v1.ConformancePayload_RequestInfo
		if sent == 0 {
			var err error
			if info, err = requestInfo(ctx, reqs); err != nil {
				return err
			}
		}
		return toStatus(e, info)
	}
	return nil
}

// requestInfo is the echo of a call: its request headers (metadata), the
// time left to its deadline, and its requests.
func requestInfo(ctx context.Context, reqs []proto.Message) (*v1.ConformancePayload_RequestInfo, error) {
	anys, err := asAnys(reqs)
	if err != nil {
		return nil, err
	}
	info := &v1.ConformancePayload_RequestInfo{Requests: anys}
	md, _ := metadata.FromIncomingContext(ctx)
	for k, vs := range md {
		h := &v1.Header{Name: k}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				// grpc-go's metadata holds binary values decoded; the
				// suite compares them as they were sent, in base64.
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			h.Value = append(h.Value, v)
		}
		info.RequestHeaders = append(info.RequestHeaders, h)
	}
	if d, ok := ctx.Deadline(); ok {
		ms := max(time.Until(d), 0).Milliseconds()
		info.TimeoutMs = &ms
	}
	return info, nil
}

func asAnys(msgs []proto.Message) ([]*anypb.Any, error) {
	out := make([]*anypb.Any, 0, len(msgs))
	for _, m := range msgs {
		a, err := anypb.New(m)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		out = append(out, a)
	}
	return out, nil
}

// toStatus is the error a definition asks for, with the echo (when not
// nil) appended to its details.
func toStatus(e *v1.Error, info *v1.ConformancePayload_RequestInfo) error {
	details := append([]*anypb.Any(nil), e.GetDetails()...)
	if info != nil {
		a, err := anypb.New(info)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		details = append(details, a)
	}
	return status.ErrorProto(&spb.Status{Code: int32(e.GetCode()), Message: e.GetMessage(), Details: details})
}

// toMD is headers as grpc-go metadata: names lowercased, binary (-bin)
// values decoded from the base64 the suite writes them in.
func toMD(hs []*v1.Header) metadata.MD {
	md := metadata.MD{}
	for _, h := range hs {
		k := strings.ToLower(h.GetName())
		for _, v := range h.GetValue() {
			if strings.HasSuffix(k, "-bin") {
				if b, err := decodeBinary(v); err == nil {
					v = string(b)
				}
			}
			md[k] = append(md[k], v)
		}
	}
	return md
}

// decodeBinary decodes a binary header value, padded or not.
func decodeBinary(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// sleepMs waits ms milliseconds. When the call ends first (its deadline
// passed, the client went away) it returns the call's status instead, and
// the handler returns that rather than answer late.
func sleepMs(ctx context.Context, ms uint32) error {
	if ms == 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}
