package webwire

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

func fieldsOf(r *Request) map[string]string {
	m := map[string]string{}
	for _, f := range r.Fields {
		m[f.Name] = f.Value
	}
	return m
}

func TestTranslateConnectUnary(t *testing.T) {
	r, err := Translate(ConnectUnary, "json", []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":path", Value: "/s/m"}, {Name: ":authority", Value: "h"},
		{Name: ":scheme", Value: "http"}, {Name: "content-type", Value: "application/json"},
		{Name: "content-encoding", Value: "gzip"}, {Name: "accept-encoding", Value: "gzip, br"},
		{Name: "connect-timeout-ms", Value: "1500"}, {Name: "connect-protocol-version", Value: "1"},
		{Name: "grpc-timeout", Value: "1S"}, {Name: "x-user", Value: "u"}, {Name: "connection", Value: "close"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := fieldsOf(r)
	for k, want := range map[string]string{
		"content-type": "application/grpc+json", "grpc-encoding": "gzip", "grpc-accept-encoding": "gzip, br",
		"grpc-timeout": grpcwire.EncodeTimeout(1500e6), "x-user": "u", ":path": "/s/m", ":method": "POST",
	} {
		if f[k] != want {
			t.Errorf("%s = %q, want %q", k, f[k], want)
		}
	}
	if _, ok := f["connection"]; ok {
		t.Error("hop-by-hop field kept")
	}
	if _, ok := f["connect-protocol-version"]; ok {
		t.Error("connect-protocol-version kept as metadata")
	}
}

func TestTranslateConnectGET(t *testing.T) {
	msg := []byte{0x0a, 0x03, 'a', 'b', 'c'}
	q := "encoding=proto&base64=1&compression=identity&connect=v1&message=" + base64.RawURLEncoding.EncodeToString(msg)
	r, err := Translate(ConnectUnary, "", []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":path", Value: "/s/m?" + q}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.GET || r.Codec != "proto" || !bytes.Equal(r.Body, msg) || fieldsOf(r)[":path"] != "/s/m" {
		t.Fatalf("got %+v", r)
	}
	for _, bad := range []string{"message=x", "encoding=proto&connect=v2", "encoding=proto&base64=1&message=%%%", "encoding=proto&base64=1&message=!!"} {
		if _, err := Translate(ConnectUnary, "", []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":path", Value: "/s/m?" + bad}}, nil); err == nil {
			t.Errorf("query %q accepted", bad)
		}
	}
}

func TestTranslateRefusesBadConnectFields(t *testing.T) {
	for _, f := range []hpack.HeaderField{
		{Name: "connect-timeout-ms", Value: "abc"}, {Name: "connect-timeout-ms", Value: "12345678901"},
		{Name: "connect-timeout-ms", Value: "-1"}, {Name: "connect-protocol-version", Value: "2"},
	} {
		_, err := Translate(ConnectStream, "proto", []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":path", Value: "/s/m"}, f}, nil)
		if err == nil || err.HTTPStatus != http.StatusBadRequest {
			t.Errorf("%s: %q: got %v", f.Name, f.Value, err)
		}
	}
}

// FuzzTranslate: any fields and query translate or are refused, without
// a panic; a translation starts with the pseudo-headers and names its
// codec in a gRPC content-type.
func FuzzTranslate(f *testing.F) {
	f.Add(uint8(ConnectUnary), "POST", "/s/m", "json", "connect-timeout-ms", "100")
	f.Add(uint8(ConnectUnary), "GET", "/s/m?encoding=json&message=%7B%7D", "", "x", "y")
	f.Add(uint8(GRPCWebText), "POST", "/s/m", "proto", "grpc-timeout", "1S")
	f.Fuzz(func(t *testing.T, p uint8, method, path, codec, name, value string) {
		proto := Protocol(p%uint8(ConnectStream+1) + 1)
		if proto > ConnectStream {
			proto = ConnectStream
		}
		r, err := Translate(proto, codec, []hpack.HeaderField{
			{Name: ":method", Value: method}, {Name: ":path", Value: path}, {Name: strings.ToLower(name), Value: value},
		}, nil)
		if err != nil {
			if err.HTTPStatus < 400 || err.HTTPStatus > 599 {
				t.Fatalf("refusal with HTTP %d", err.HTTPStatus)
			}
			return
		}
		if len(r.Fields) < 5 || r.Fields[0].Name != ":method" || r.Fields[4].Name != "content-type" || r.Fields[4].Value != grpcwire.ContentType(r.Codec) {
			t.Fatalf("fields %v", r.Fields)
		}
	})
}

// FuzzTextDecoder: a grpc-web-text body, padded per message and cut
// anywhere, decodes to the bytes encoded; arbitrary bytes give an error or
// some bytes, never a panic.
func FuzzTextDecoder(f *testing.F) {
	f.Add([]byte("hello"), []byte("world"), uint8(3), []byte("AAAA"))
	f.Fuzz(func(t *testing.T, a, b []byte, cut uint8, junk []byte) {
		pool := bufpool.Default()
		enc := base64.StdEncoding.EncodeToString(a) + base64.StdEncoding.EncodeToString(b)
		at := int(cut) % (len(enc) + 1)
		var d textDecoder
		var got []byte
		for _, part := range []string{enc[:at], enc[at:]} {
			out, err := d.decode(pool, pool.Copy([]byte(part)))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if out != nil {
				got = append(got, out.Bytes()...)
				out.Free()
			}
		}
		if err := d.finish(); err != nil || !bytes.Equal(got, append(append([]byte(nil), a...), b...)) {
			t.Fatalf("got %q (%v), want %q%q", got, err, a, b)
		}
		var j textDecoder
		if out, err := j.decode(pool, pool.Copy(junk)); err == nil && out != nil {
			out.Free()
		}
		j.finish()
	})
}
