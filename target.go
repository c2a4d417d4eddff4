package leangrpc

import (
	"cmp"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/grpc/resolver"
)

// Targets are parsed as grpc-go's NewClient parses them, so that a target
// string names the same resolver and the same authority on either stack:
// an RFC 3986 URL whose scheme picks a resolver builder (WithResolvers
// first, then grpc-go's registry); a string that does not parse or names
// no known scheme is read again as "dns:///" + target.

// defaultScheme is NewClient's scheme for targets without a known one.
const defaultScheme = "dns"

// targetDefaultScheme returns the scheme prefixed to targets that name no
// registered one: dns, unless the program changed grpc-go's default with
// resolver.SetDefaultScheme. grpc-go keeps whether it was changed in an
// internal flag; leangrpc sees only the value, so a program that sets it
// to "passthrough" (grpc-go's initial value) gets dns here.
func targetDefaultScheme() string {
	if s := resolver.GetDefaultScheme(); s != "passthrough" {
		return s
	}
	return defaultScheme
}

// parseTarget returns the parsed target, the builder of its resolver and
// the default scheme it was read with ("" when it named its own): scheme,
// or NewClient's when scheme is "".
func parseTarget(target, scheme string, own []resolver.Builder) (t resolver.Target, b resolver.Builder, defScheme string, err error) {
	if u, err := url.Parse(target); err == nil {
		if b := findResolver(u.Scheme, own); b != nil {
			return resolver.Target{URL: *u}, b, "", nil
		}
	}
	defScheme = cmp.Or(scheme, targetDefaultScheme())
	u, err := url.Parse(defScheme + ":///" + target)
	if err != nil {
		return resolver.Target{}, nil, "", err
	}
	if b = findResolver(u.Scheme, own); b == nil {
		return resolver.Target{}, nil, "", fmt.Errorf("could not get resolver for default scheme: %q", u.Scheme)
	}
	return resolver.Target{URL: *u}, b, defScheme, nil
}

// parsedTarget parses the target again as NewClient did. The ClientConn
// keeps the string and the scheme it was read with rather than the parsed
// URL: a url.URL is 150 bytes that every idle ClientConn would carry for
// the one Build and the rare CanonicalTarget.
func (cc *ClientConn) parsedTarget() resolver.Target {
	s := cc.target
	if cc.defScheme != "" {
		s = cc.defScheme + ":///" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return resolver.Target{} // not reached: NewClient parsed it
	}
	return resolver.Target{URL: *u}
}

// findResolver returns the builder for scheme: the first of the
// WithResolvers builders that has it, else the registered one, else nil.
func findResolver(scheme string, own []resolver.Builder) resolver.Builder {
	for _, b := range own {
		if b.Scheme() == scheme {
			return b
		}
	}
	return resolver.Get(scheme)
}

// targetAuthority returns the :authority a target implies when neither
// WithAuthority nor the credentials name one: the resolver's own choice
// if its builder makes one (the unix resolvers say "localhost"), else the
// endpoint, escaped for an authority, with "localhost" before a bare
// ":port".
func targetAuthority(t resolver.Target, b resolver.Builder) string {
	if o, ok := b.(resolver.AuthorityOverrider); ok {
		return o.OverrideAuthority(t)
	}
	ep := t.Endpoint()
	if strings.HasPrefix(ep, ":") {
		return "localhost" + escapeAuthority(ep)
	}
	return escapeAuthority(ep)
}

// escapeAuthority percent-encodes the bytes RFC 3986 §3.2 does not allow
// in an authority: anything but letters, digits, the unreserved and
// sub-delimiter marks, and the delimiters of host, port and userinfo.
func escapeAuthority(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if authorityByte(c) {
			if b.Len() > 0 {
				b.WriteByte(c)
			}
			continue
		}
		if b.Len() == 0 {
			b.Grow(len(s) + 8)
			b.WriteString(s[:i])
		}
		const hex = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	if b.Len() == 0 {
		return s
	}
	return b.String()
}

func authorityByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.~!$&'()*+,;=:[]@", c) >= 0
}

// CanonicalTarget returns the target in its canonical form,
// scheme://authority/endpoint, as grpc-go's ClientConn does: a target
// given without a known scheme reads "dns:///" + target.
func (cc *ClientConn) CanonicalTarget() string { return cc.parsedTarget().String() }
