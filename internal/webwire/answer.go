package webwire

import (
	"net/http"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"github.com/leangrpc/leangrpc/internal/hpack"
	grpcstatus "google.golang.org/grpc/status"
)

// Reject answers in t's protocol a request grpcwire refused, and lets go
// of t.
func (t *Transport) Reject(rej *grpcwire.Reject) {
	switch {
	case rej.RST:
		t.c.Reset(rej.Code)
	case rej.Plain:
		Plain(t.c, t.pool, rej.HTTPStatus, rej.Status.Message())
	default:
		t.Fail(rej.HTTPStatus, rej.Status)
	}
	t.Release()
}

// Fail answers with st and no message, as a call that failed before its
// handler ran; httpStatus is the status of gRPC's Trailers-Only response
// (0: 200).
func (t *Transport) Fail(httpStatus int, st *grpcstatus.Status) {
	fields := grpcwire.AppendTrailers(nil, true, httpStatus, t.codec, st, nil)
	t.Send(h2conn.TrailersItem(fields))
}

// Plain answers with an HTTP status and a text body, as net/http's Error
// does, for a request that is no call of any protocol served.
func Plain(c Carrier, pool *bufpool.Pool, status int, msg string) {
	fields := []hpack.HeaderField{
		{Name: "content-type", Value: "text/plain; charset=utf-8"},
		{Name: "x-content-type-options", Value: "nosniff"},
	}
	c.Send(status, fields, pool.Copy([]byte(msg+"\n")), nil, true, false)
}

// MethodNotAllowed answers 405 with the Allow field, for a request to a
// method's path with an HTTP method its protocols do not use.
func MethodNotAllowed(c Carrier, pool *bufpool.Pool, method, allow string) {
	fields := []hpack.HeaderField{
		{Name: "allow", Value: allow},
		{Name: "content-type", Value: "text/plain; charset=utf-8"},
		{Name: "x-content-type-options", Value: "nosniff"},
	}
	c.Send(http.StatusMethodNotAllowed, fields, pool.Copy([]byte("leangrpc: method "+method+" not allowed\n")), nil, true, false)
}

// Refuse answers a request Translate refused, in its protocol, and lets
// go of c.
func Refuse(c Carrier, pool *bufpool.Pool, proto Protocol, codec string, e *Error) {
	defer c.Release()
	if e.HTTPStatus == http.StatusUnsupportedMediaType || proto == None {
		Plain(c, pool, e.HTTPStatus, e.Msg)
		return
	}
	if codec == "" {
		codec = "proto"
	}
	if proto == ConnectUnary {
		body := errorJSON(status{code: e.Code, msg: e.Msg})
		c.Send(e.HTTPStatus, []hpack.HeaderField{{Name: "content-type", Value: "application/json"}},
			pool.Copy(body), nil, true, false)
		return
	}
	t := &Transport{c: c, proto: proto, codec: codec, pool: pool}
	t.Fail(0, grpcstatus.New(e.Code, e.Msg))
}
