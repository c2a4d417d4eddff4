package leangrpc_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
)

// largeUnaryRequest is a UnaryCall request body with a payload of n bytes
// asking for a response of 10 bytes.
func largeUnaryRequest(t *testing.T, n int) []byte {
	t.Helper()
	msg, err := proto.Marshal(&testpb.SimpleRequest{ResponseSize: 10, Payload: &testpb.Payload{Body: bytes.Repeat([]byte{7}, n)}})
	if err != nil {
		t.Fatal(err)
	}
	return grpcFrame(0, msg)
}

// sendInWindow writes body on stream id in DATA frames as the windows and
// the server's frame size allow, waiting for WINDOW_UPDATEs when they are
// spent (the peer answers PINGs and SETTINGS meanwhile), and ends the
// stream with the last frame.
func sendInWindow(t *testing.T, p *h2test.Peer, id uint32, body []byte) {
	t.Helper()
	for len(body) > 0 {
		conn, stream := p.SendWindow(id)
		n := int(min(conn, stream, int64(len(body))))
		if max := int(p.RemoteSettings[h2frame.SettingMaxFrameSize]); max >= h2frame.MinMaxFrameSize {
			n = min(n, max)
		} else {
			n = min(n, h2frame.MinMaxFrameSize)
		}
		if n <= 0 {
			p.WantFrame(h2frame.TypeWindowUpdate) // tracked by the peer
			continue
		}
		p.WriteData(id, n == len(body), body[:n])
		body = body[n:]
	}
}

// wantOK reads the response to a UnaryCall on stream id: headers, a
// message and status OK.
func wantOK(t *testing.T, p *h2test.Peer, id uint32) {
	t.Helper()
	h := p.WantHeaders(id)
	if h.Get(":status") != "200" || h.EndStream {
		t.Fatalf("response headers %s", h2test.FormatFields(h.Fields))
	}
	body, tr := p.WantBodyTrailers(id, true)
	if len(body) == 0 || tr.Get("grpc-status") != "0" {
		t.Fatalf("body %d bytes, trailers %s", len(body), h2test.FormatFields(tr.Fields))
	}
}

// A client that sends part of a message larger than the stream window,
// then a PING, and sends the rest only once the PING is answered, gets its
// answer: the receive low-water mark never waits for bytes past the frame
// being read, which a peer may hold back.
func TestRecvLowWaterPartThenPing(t *testing.T) {
	tg := attackTarget(t, leangrpc.RecvLowWater(true), leangrpc.InitialWindowSize(64<<10), leangrpc.InitialConnWindowSize(64<<10))
	p := tg.peer(t)
	p.WriteHeaders(1, false, request(unaryPath)...)
	body := largeUnaryRequest(t, 600<<10)
	if _, stream := p.SendWindow(1); stream >= int64(len(body)) {
		t.Fatalf("stream window %d: the test needs one smaller than the message (%d bytes)", stream, len(body))
	}
	p.WriteData(1, false, body[:h2frame.MinMaxFrameSize])
	ping := [8]byte{'l', 'o', 'w', 'w', 'a', 't', 'e', 'r'}
	p.WritePing(ping)
	p.WantPingAck(ping)
	sendInWindow(t, p, 1, body[h2frame.MinMaxFrameSize:])
	wantOK(t, p, 1)
}

// A large DATA frame whose payload arrives in two bursts, with a PING
// before it: the server reads it under the mark and answers, and the
// connection stays usable.
func TestRecvLowWaterFrameInBursts(t *testing.T) {
	for _, on := range []bool{true, false} {
		tg := attackTarget(t, leangrpc.RecvLowWater(on), leangrpc.InitialWindowSize(4<<20), leangrpc.InitialConnWindowSize(4<<20))
		p := tg.peer(t)
		p.WriteHeaders(1, false, request(unaryPath)...)
		ping := [8]byte{1}
		p.WritePing(ping)
		p.WantPingAck(ping) // by now the server raised its frame size after the request's headers
		max := int(p.RemoteSettings[h2frame.SettingMaxFrameSize])
		body := largeUnaryRequest(t, 200<<10)
		if max < len(body) {
			t.Fatalf("server's max frame size %d, want one that takes %d bytes", max, len(body))
		}
		var hdr [h2frame.HeaderLen]byte
		n := len(body)
		hdr[0], hdr[1], hdr[2] = byte(n>>16), byte(n>>8), byte(n)
		hdr[3], hdr[4], hdr[8] = byte(h2frame.TypeData), byte(h2frame.FlagEndStream), 1
		p.WriteBytes(append(hdr[:], body[:n/3]...))
		time.Sleep(30 * time.Millisecond)
		p.WriteBytes(body[n/3:])
		wantOK(t, p, 1)

		// And a small call after it on the same connection.
		p.WriteHeaders(3, false, request(unaryPath)...)
		p.WriteData(3, true, unaryRequest(10))
		wantOK(t, p, 3)
	}
}

// Large messages go both ways with the mark on and off, and through a
// leangrpc client and server alike.
func TestRecvLowWaterRoundTrip(t *testing.T) {
	for _, on := range []bool{true, false} {
		tg := attackTarget(t, leangrpc.RecvLowWater(on))
		cc, err := leangrpc.NewClient(tg.addr, leangrpc.WithInsecure(), leangrpc.WithRecvLowWater(on))
		if err != nil {
			t.Fatal(err)
		}
		c := testgrpc.NewTestServiceClient(cc)
		for _, n := range []int{100, 64 << 10, 1 << 20, 3 << 20} {
			body := bytes.Repeat([]byte{byte(n)}, n)
			resp, err := c.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: int32(n), Payload: &testpb.Payload{Body: body}})
			if err != nil {
				t.Fatalf("mark %v, %d bytes: %v", on, n, err)
			}
			if len(resp.GetPayload().GetBody()) != n {
				t.Fatalf("mark %v: response of %d bytes, want %d", on, len(resp.GetPayload().GetBody()), n)
			}
		}
		cc.Close()
	}
}
