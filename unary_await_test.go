package leangrpc_test

import (
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	"github.com/leangrpc/leangrpc/internal/sockio"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// A unary call's handler waits for its request: streams opened and reset
// before any DATA (the rapid reset attack) start no handler, a request
// whose DATA comes well after its HEADERS is answered, and a connection
// resetting more than a hundred such streams a second gets GOAWAY
// ENHANCE_YOUR_CALM.
func TestUnaryHandlerAwaitsRequest(t *testing.T) {
	sockio.StartIdlePoller() // process-wide, started before the baseline
	base := runtime.NumGoroutine()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := leangrpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(lis)
	defer func() {
		s.Stop()
		checkGoroutines(t, base)
	}()
	nc, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p := h2test.NewPeer(t, nc, h2test.ClientRole)
	p.Greet()

	block := requestBlock(unaryPath)
	rst := binary.BigEndian.AppendUint32(nil, uint32(h2frame.ErrCodeCancel))
	var b []byte
	id := uint32(1)
	for range 90 { // each counts ten resets: under the limit, the connection stays
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders, id, block)
		b = h2test.AppendFrame(b, h2frame.TypeRSTStream, 0, id, rst)
		id += 2
	}
	p.WriteBytes(b)
	p.WritePing([8]byte{1})
	p.WantPingAck([8]byte{1}) // the server has read every reset
	time.Sleep(50 * time.Millisecond)
	if n := leangrpc.HandlerWorkers(s); n != 0 {
		t.Errorf("90 streams reset before their request started %d handler workers, want 0", n)
	}

	p.WriteHeaders(id, false, request(unaryPath)...)
	time.Sleep(100 * time.Millisecond)
	p.WriteData(id, true, unaryRequest(10))
	if h := p.WantHeaders(id); h.Get(":status") != "200" {
		t.Fatalf("response headers %v", h)
	}
	body, tr := p.WantBodyTrailers(id, true)
	if tr.Get("grpc-status") != "0" || len(body) == 0 {
		t.Errorf("a request sent 100 ms after its headers: status %q, %d bytes of response", tr.Get("grpc-status"), len(body))
	}

	// A hundred and fifty more within the second: over the limit.
	b = b[:0]
	for range 150 {
		id += 2
		b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagEndHeaders, id, block)
		b = h2test.AppendFrame(b, h2frame.TypeRSTStream, 0, id, rst)
	}
	p.WriteBytes(b)
	wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
}
