package webwire

import (
	"strings"

	"github.com/leangrpc/leangrpc/internal/hpack"
)

// CORS is a server's cross-origin policy for browsers: the origins whose
// pages may call it. Without one, a browser lets no page of another origin
// read a response (and sends no preflighted request), so cross-origin
// calls fail in the browser, as the same-origin policy intends.
type CORS struct {
	any     bool
	origins map[string]bool
}

// NewCORS makes the policy allowing origins ("https://app.example.com";
// "*" allows every origin).
func NewCORS(origins []string) *CORS {
	c := &CORS{origins: make(map[string]bool)}
	for _, o := range origins {
		if o == "*" {
			c.any = true
		}
		c.origins[strings.ToLower(o)] = true
	}
	return c
}

// Allowed reports whether a page of origin may call.
func (c *CORS) Allowed(origin string) bool {
	return origin != "" && (c.any || c.origins[strings.ToLower(origin)])
}

// exposed are the response fields a browser page needs to read: the
// status in a Trailers-Only gRPC-Web response, encodings, and the
// metadata that a handler sets (a browser exposes no other field).
const exposed = "grpc-status, grpc-message, grpc-status-details-bin, grpc-encoding, " +
	"connect-content-encoding, content-encoding, *"

// ResponseFields are the fields an allowed origin's response carries.
func (c *CORS) ResponseFields(origin string) []hpack.HeaderField {
	return []hpack.HeaderField{
		{Name: "access-control-allow-origin", Value: origin},
		{Name: "access-control-expose-headers", Value: exposed},
		{Name: "vary", Value: "Origin"},
	}
}

// maxAge is how long a browser may keep a preflight's answer (seconds).
const maxAge = "7200"

// Preflight answers a preflight request (OPTIONS with
// access-control-request-method) from an allowed origin: the fields of a
// 204 response letting the page send the request it asked about, with
// the headers it named.
func (c *CORS) Preflight(origin, reqHeaders string) []hpack.HeaderField {
	f := []hpack.HeaderField{
		{Name: "access-control-allow-origin", Value: origin},
		{Name: "access-control-allow-methods", Value: "GET, POST"},
		{Name: "access-control-max-age", Value: maxAge},
		{Name: "vary", Value: "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"},
	}
	if reqHeaders != "" {
		f = append(f, hpack.HeaderField{Name: "access-control-allow-headers", Value: reqHeaders})
	}
	return f
}
