package h2frame

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/hpack"
	"golang.org/x/net/http2"
	xhpack "golang.org/x/net/http2/hpack"
)

var grpcRequest = []hpack.HeaderField{
	{Name: ":method", Value: "POST"},
	{Name: ":scheme", Value: "http"},
	{Name: ":path", Value: "/grpc.testing.BenchmarkService/UnaryCall"},
	{Name: ":authority", Value: "localhost:50051"},
	{Name: "content-type", Value: "application/grpc"},
	{Name: "te", Value: "trailers"},
	{Name: "grpc-timeout", Value: "1S"},
	{Name: "user-agent", Value: "grpc-go/1.85.0"},
}

// bigFields returns a header list whose encoding needs several frames.
func bigFields(n int) []hpack.HeaderField {
	fs := append([]hpack.HeaderField(nil), grpcRequest...)
	for i := 0; i < n; i++ {
		fs = append(fs, hpack.HeaderField{Name: fmt.Sprintf("x-meta-%d", i), Value: strings.Repeat(string(rune('a'+i%26)), 1000)})
	}
	return fs
}

func sameFields(t *testing.T, got []hpack.HeaderField, want []hpack.HeaderField) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d fields, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Name != want[i].Name || got[i].Value != want[i].Value {
			t.Fatalf("field %d = %q: %q, want %q: %q", i, got[i].Name, got[i].Value, want[i].Name, want[i].Value)
		}
	}
}

// TestWriteHeadersXnetReads writes header blocks of one and several frames
// and reads them with x/net's Framer and HPACK decoder.
func TestWriteHeadersXnetReads(t *testing.T) {
	needHPACK(t)
	var sink bytes.Buffer
	w := NewWriter(&sink, WriterConfig{})
	big := bigFields(60) // ~37 KiB encoded: HEADERS + CONTINUATIONs
	w.WriteHeaders(1, false, grpcRequest)
	w.WriteHeaders(3, true, big)
	w.WriteHeaders(5, true, grpcRequest) // now from the dynamic table
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// Count the raw frames.
	types := []http2.FrameType{}
	raw := http2.NewFramer(nil, bytes.NewReader(sink.Bytes()))
	for {
		f, err := raw.ReadFrame()
		if err != nil {
			break
		}
		types = append(types, f.Header().Type)
	}
	if s := fmt.Sprint(types); !strings.HasPrefix(s, "[HEADERS HEADERS CONTINUATION ") || !strings.HasSuffix(s, " CONTINUATION HEADERS]") {
		t.Errorf("frames: %v", types)
	}

	fr := http2.NewFramer(nil, bytes.NewReader(sink.Bytes()))
	fr.ReadMetaHeaders = xhpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	for _, want := range []struct {
		id     uint32
		end    bool
		fields []hpack.HeaderField
	}{{1, false, grpcRequest}, {3, true, big}, {5, true, grpcRequest}} {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		mh := f.(*http2.MetaHeadersFrame)
		if mh.StreamID != want.id || mh.StreamEnded() != want.end {
			t.Errorf("header %v", mh.FrameHeader)
		}
		got := make([]hpack.HeaderField, len(mh.Fields))
		for i, f := range mh.Fields {
			got[i] = hpack.HeaderField{Name: f.Name, Value: f.Value}
		}
		sameFields(t, got, want.fields)
	}
}

// xnetHeaderWire encodes header blocks with x/net: plain, padded with
// priority, split into CONTINUATIONs, and a PUSH_PROMISE between.
func xnetHeaderWire(t testing.TB, fields []hpack.HeaderField, big []hpack.HeaderField) []byte {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	var hb bytes.Buffer
	enc := xhpack.NewEncoder(&hb)
	block := func(fs []hpack.HeaderField) []byte {
		hb.Reset()
		for _, f := range fs {
			enc.WriteField(xhpack.HeaderField{Name: f.Name, Value: f.Value, Sensitive: f.Sensitive})
		}
		return append([]byte(nil), hb.Bytes()...)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(fields), EndHeaders: true}))
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(fields), EndHeaders: true, EndStream: true,
		PadLength: 17, Priority: http2.PriorityParam{StreamDep: 1, Exclusive: true, Weight: 7}}))
	b := block(big)
	third := len(b) / 3
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: b[:third], PadLength: 3}))
	must(fr.WriteContinuation(5, false, b[third:third]))
	must(fr.WriteContinuation(5, false, b[third:2*third]))
	must(fr.WriteContinuation(5, true, b[2*third:]))
	must(fr.WritePushPromise(http2.PushPromiseParam{StreamID: 7, PromiseID: 8, BlockFragment: block(fields[:2]), EndHeaders: true}))
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 9, BlockFragment: block(fields), EndHeaders: true}))
	return buf.Bytes()
}

func TestXnetHeadersWeRead(t *testing.T) {
	needHPACK(t)
	big := bigFields(30)
	wire := xnetHeaderWire(t, grpcRequest, big)
	for _, rc := range readerCases(wire) {
		t.Run(rc.name, func(t *testing.T) {
			pool := bufpool.New(nil)
			r := NewReader(rc.src(), ReaderConfig{Pool: pool})
			defer r.Close()
			hdr := func(id uint32) *HeadersFrame {
				t.Helper()
				f, err := r.ReadFrame()
				if err != nil {
					t.Fatal(err)
				}
				h := f.(*HeadersFrame)
				if h.StreamID != id || !h.Flags.Has(FlagEndHeaders) || h.Truncated || h.Invalid != "" {
					t.Fatalf("headers %v truncated=%v invalid=%q", h.Header(), h.Truncated, h.Invalid)
				}
				return h
			}
			h := hdr(1)
			sameFields(t, h.Fields, grpcRequest)
			h = hdr(3)
			sameFields(t, h.Fields, grpcRequest)
			if !h.EndStream() || !h.HasPriority || h.Priority != (Priority{1, true, 7}) {
				t.Errorf("padded priority headers: %+v", h)
			}
			h = hdr(5)
			sameFields(t, h.Fields, big)
			f, err := r.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if pp := f.(*PushPromiseFrame); pp.StreamID != 7 || pp.PromisedID != 8 {
				t.Errorf("push promise %+v", pp)
			}
			h = hdr(9)
			sameFields(t, h.Fields, grpcRequest)
			if _, err := r.ReadFrame(); err != io.EOF {
				t.Fatalf("end: %v", err)
			}
			if pool.Outstanding() != 0 {
				t.Errorf("pool outstanding %d", pool.Outstanding())
			}
		})
	}
}

// TestWriteHeadersReadBack writes with our Writer, reads with our Reader,
// across max frame sizes, so both HPACK contexts stay in step.
func TestWriteHeadersReadBack(t *testing.T) {
	needHPACK(t)
	var sink bytes.Buffer
	w := NewWriter(&sink, WriterConfig{})
	big := bigFields(50)
	w.WriteHeaders(1, true, grpcRequest)
	w.WriteHeaders(3, false, big)
	w.SetPeerMaxFrameSize(1 << 20)
	w.WriteHeaders(5, false, big)
	w.WriteHeaders(7, true, grpcRequest)
	w.Flush()
	r := NewReader(&sink, ReaderConfig{MaxFrameSize: 1 << 20})
	defer r.Close()
	for _, want := range [][]hpack.HeaderField{grpcRequest, big, big, grpcRequest} {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		sameFields(t, f.(*HeadersFrame).Fields, want)
	}
}

// encodeBlock encodes fields with x/net's encoder, which does not police
// what it is given.
func encodeBlock(fields ...string) []byte {
	var hb bytes.Buffer
	enc := xhpack.NewEncoder(&hb)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(xhpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return hb.Bytes()
}

func TestFieldRules(t *testing.T) {
	needHPACK(t)
	for _, tc := range []struct {
		invalid string
		fields  []string
	}{
		{"", []string{":method", "POST", ":path", "/x", "content-type", "application/grpc", "te", "trailers"}},
		{"", []string{":status", "200", "grpc-status", "0", "x-empty", ""}},
		{"", []string{":protocol", "websocket", ":authority", "a"}},
		{"uppercase_name", []string{"Content-Type", "x"}},
		{"uppercase_name", []string{"x-Foo", "x"}},
		{"invalid_name", []string{"x foo", "x"}},
		{"invalid_name", []string{"x\x7f", "x"}},
		{"invalid_name", []string{"x\xc3\xa9", "x"}},
		{"invalid_name", []string{"a:b", "x"}},
		{"empty_name", []string{"", "x"}},
		{"connection_header", []string{"connection", "close"}},
		{"connection_header", []string{"keep-alive", "1"}},
		{"connection_header", []string{"proxy-connection", "x"}},
		{"connection_header", []string{"transfer-encoding", "chunked"}},
		{"connection_header", []string{"upgrade", "h2c"}},
		{"te_not_trailers", []string{"te", "gzip"}},
		{"pseudo_after_regular", []string{":method", "GET", "x", "y", ":path", "/"}},
		{"unknown_pseudo", []string{":foo", "bar"}},
		{"duplicate_pseudo", []string{":path", "/a", ":path", "/b"}},
		{"invalid_value", []string{"x", "a\nb"}},
		{"invalid_value", []string{"x", "a\x00b"}},
		{"invalid_value", []string{"x", "a\rb"}},
		{"invalid_value", []string{"x", " a"}},
		{"invalid_value", []string{"x", "a\t"}},
	} {
		t.Run(tc.invalid+fmt.Sprint(tc.fields), func(t *testing.T) {
			wire := frameBytes(TypeHeaders, FlagEndHeaders, 1, encodeBlock(tc.fields...))
			r := NewReader(bytes.NewReader(wire), ReaderConfig{})
			defer r.Close()
			f, err := r.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if got := f.(*HeadersFrame).Invalid; got != tc.invalid {
				t.Fatalf("Invalid = %q, want %q", got, tc.invalid)
			}
		})
	}
}

func TestHeaderListTruncated(t *testing.T) {
	needHPACK(t)
	fields := []string{":path", "/a", "x-big", strings.Repeat("v", 200), "x-after", "1"}
	block := encodeBlock(fields...)
	wire := cat(frameBytes(TypeHeaders, FlagEndHeaders, 1, block), frameBytes(TypeHeaders, FlagEndHeaders, 3, encodeBlock(":path", "/a")))
	r := NewReader(bytes.NewReader(wire), ReaderConfig{MaxHeaderListSize: 100})
	defer r.Close()
	f, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	h := f.(*HeadersFrame)
	if !h.Truncated || len(h.Fields) != 1 || h.Fields[0].Name != ":path" {
		t.Fatalf("truncated=%v fields=%v", h.Truncated, h.Fields)
	}
	// The next block decodes: HPACK state is in sync.
	f, err = r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if h := f.(*HeadersFrame); h.Truncated || len(h.Fields) != 1 || h.Fields[0].Value != "/a" {
		t.Fatalf("after truncation: %+v", h)
	}
	// Raising the limit lets the same list through.
	r2 := NewReader(bytes.NewReader(wire[:9+len(block)]), ReaderConfig{MaxHeaderListSize: 100})
	r2.SetMaxHeaderListSize(1000)
	f, err = r2.ReadFrame()
	if err != nil || f.(*HeadersFrame).Truncated || len(f.(*HeadersFrame).Fields) != 3 {
		t.Fatalf("with a larger limit: %v %v", f, err)
	}
}
