package h2test_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2/hpack"
	"golang.org/x/net/nettest"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	lhpack "github.com/leangrpc/leangrpc/internal/hpack"
)

// xDecoder is x/net's HPACK decoder as an oracle HeaderDecoder.
type xDecoder struct{ d *hpack.Decoder }

func newXDecoder() *xDecoder { return &xDecoder{hpack.NewDecoder(4096, nil)} }

func (x *xDecoder) DecodeBlock(block []byte) ([]lhpack.HeaderField, error) {
	fs, err := x.d.DecodeFull(block)
	out := make([]lhpack.HeaderField, len(fs))
	for i, f := range fs {
		out[i] = lhpack.HeaderField{Name: f.Name, Value: f.Value, Sensitive: f.Sensitive}
	}
	return out, err
}

// TestPeerDemo is the harness demo: a scripted client and a scripted server
// talk to each other over the in-memory pipe, inside a synctest bubble, with
// every read chopping mode and a small write capacity.
func TestPeerDemo(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  h2test.PipeConfig
	}{
		{"whole", h2test.PipeConfig{}},
		{"chop1", h2test.PipeConfig{ChopReads: h2test.ChopOne, Capacity: 64}},
		{"random", h2test.PipeConfig{ChopReads: h2test.ChopRandom, Capacity: 100, Seed: 42}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h2test.CheckGoroutines(t)
				cc, sc := h2test.Pipe(tc.cfg)
				defer cc.Close()
				defer sc.Close()

				var wg sync.WaitGroup
				wg.Go(func() {
					srv := h2test.NewPeer(h2test.Background(t), sc, h2test.ServerRole)
					srv.Decoder = newXDecoder()
					srv.Greet(h2frame.Setting{ID: h2frame.SettingMaxConcurrentStreams, Val: 10})
					req := srv.WantHeaders(1)
					if req.Get(":path") != "/echo" || req.EndStream {
						t.Errorf("server got %+v", req)
					}
					body := srv.WantBody(1, true)
					srv.WriteHeaders(1, false, ":status", "200")
					srv.WriteData(1, false, body)
					srv.WriteHeaders(1, true, "grpc-status", "0")
					d := srv.WantPing()
					srv.WritePingAck(d)
					srv.WantGoAway(h2frame.ErrCodeNo)
					srv.WriteGoAway(1, h2frame.ErrCodeNo, "")
					srv.Close()
				})

				cli := h2test.NewPeer(t, cc, h2test.ClientRole)
				cli.Decoder = newXDecoder()
				cli.Greet()
				if got := cli.RemoteSettings[h2frame.SettingMaxConcurrentStreams]; got != 10 {
					t.Errorf("RemoteSettings[MAX_CONCURRENT_STREAMS] = %d, want 10", got)
				}
				cli.WriteHeaders(1, false, ":method", "POST", ":scheme", "http", ":path", "/echo", ":authority", "x")
				payload := bytes.Repeat([]byte("0123456789"), 3000) // two frames
				cli.WriteData(1, false, payload[:16384])
				cli.WriteData(1, true, payload[16384:])
				if conn, stream := cli.SendWindow(1); conn != 65535-30000 || stream != 65535-30000 {
					t.Errorf("SendWindow before updates = %d, %d", conn, stream)
				}
				resp := cli.WantHeaders(1)
				if resp.Get(":status") != "200" || resp.EndStream {
					t.Errorf("response headers %+v", resp)
				}
				if got := cli.WantData(1).Data(); !bytes.Equal(got, payload) {
					t.Errorf("echoed %d bytes, want %d", len(got), len(payload))
				}
				if tr := cli.WantHeaders(1); tr.Get("grpc-status") != "0" || !tr.EndStream {
					t.Errorf("trailers %+v", tr)
				}
				// The server's WINDOW_UPDATEs were skipped but counted.
				if conn, _ := cli.SendWindow(1); conn != 65535 {
					t.Errorf("connection send window after updates = %d, want 65535", conn)
				}
				cli.WritePing([8]byte{1, 2, 3})
				cli.WantPingAck([8]byte{1, 2, 3})
				cli.WriteGoAway(0, h2frame.ErrCodeNo, "")
				cli.WantGoAway(h2frame.ErrCodeNo)
				cli.WantClosed()
				wg.Wait()
			})
		})
	}
}

// TestPeerFailures checks that expectations fail, with a message, when what
// arrives differs.
func TestPeerFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script func(p *h2test.Peer)
		want   func(p *h2test.Peer)
	}{
		{"rst code", func(p *h2test.Peer) { p.WriteRST(1, h2frame.ErrCodeCancel) },
			func(p *h2test.Peer) { p.WantRST(1, h2frame.ErrCodeProtocol) }},
		{"rst stream", func(p *h2test.Peer) { p.WriteRST(3, h2frame.ErrCodeCancel) },
			func(p *h2test.Peer) { p.WantRST(1, h2frame.ErrCodeCancel) }},
		{"wrong type", func(p *h2test.Peer) { p.WriteGoAway(0, h2frame.ErrCodeNo, "") },
			func(p *h2test.Peer) { p.WantRST(1, h2frame.ErrCodeCancel) }},
		{"timeout", func(p *h2test.Peer) {},
			func(p *h2test.Peer) { p.WantGoAway(h2frame.ErrCodeNo) }},
		{"nothing", func(p *h2test.Peer) { p.WriteData(1, false, nil) },
			func(p *h2test.Peer) { p.WantNothing(time.Second) }},
		{"closed", func(p *h2test.Peer) { p.Close() },
			func(p *h2test.Peer) { p.WantSettingsAck() }},
		{"still open", func(p *h2test.Peer) {},
			func(p *h2test.Peer) { p.WantClosed() }},
		{"ping data", func(p *h2test.Peer) { p.WritePingAck([8]byte{9}) },
			func(p *h2test.Peer) { p.WantPingAck([8]byte{8}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := h2test.Pipe(h2test.PipeConfig{})
				defer a.Close()
				defer b.Close()
				rec := &recorder{TB: t}
				tc.script(h2test.NewPeer(t, a, h2test.ClientRole))
				p := h2test.NewPeer(rec, b, h2test.ServerRole)
				done := make(chan struct{})
				go func() {
					defer close(done)
					tc.want(p)
				}()
				<-done
				if rec.msg == "" {
					t.Fatalf("expectation passed; want a failure")
				}
				t.Logf("failure message: %s", rec.msg)
			})
		})
	}
}

// recorder captures a Fatalf instead of failing the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = format
	if len(args) > 0 {
		r.msg = errorsf(format, args...)
	}
	runtime_Goexit()
}
func (r *recorder) Logf(string, ...any) {}

func TestPipeNettest(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := h2test.Pipe(h2test.PipeConfig{Capacity: 64 << 10})
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

func TestPipeCapacityBlocksWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := h2test.Pipe(h2test.PipeConfig{Capacity: 10})
		defer a.Close()
		defer b.Close()
		var n int
		var err error
		done := make(chan struct{})
		go func() {
			n, err = a.Write(make([]byte, 25))
			close(done)
		}()
		synctest.Wait()
		if got := a.Unread(); got != 10 {
			t.Fatalf("Unread = %d, want 10 (capacity)", got)
		}
		select {
		case <-done:
			t.Fatal("Write returned with the buffer full")
		default:
		}
		b.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 100)
		total := 0
		for total < 25 {
			m, rerr := b.Read(buf)
			if rerr != nil {
				t.Fatalf("Read after %d bytes: %v", total, rerr)
			}
			total += m
		}
		<-done
		if n != 25 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		// Raising the capacity unblocks a writer.
		a.SetWriteCapacity(1)
		go func() { a.Write([]byte("xyz")) }()
		synctest.Wait()
		if a.Unread() != 1 {
			t.Fatalf("Unread = %d, want 1", a.Unread())
		}
		a.SetWriteCapacity(0)
		synctest.Wait()
		if a.Unread() != 3 {
			t.Fatalf("Unread after lifting the capacity = %d, want 3", a.Unread())
		}
	})
}

func TestPipeWriteDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := h2test.Pipe(h2test.PipeConfig{Capacity: 4})
		defer a.Close()
		defer b.Close()
		a.SetWriteDeadline(time.Now().Add(time.Second))
		start := time.Now()
		n, err := a.Write([]byte("0123456789"))
		if n != 4 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Write = %d, %v; want 4, deadline exceeded", n, err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("Write returned after %v, want 1s", d)
		}
	})
}

func TestPipeChop(t *testing.T) {
	for _, tc := range []struct {
		chop      int
		wantSizes func([]int) bool
	}{
		{h2test.ChopOne, func(s []int) bool { return len(s) == 100 }},
		{3, func(s []int) bool { return len(s) == 34 }},
		{h2test.ChopNone, func(s []int) bool { return len(s) == 1 }},
		{h2test.ChopRandom, func(s []int) bool { return len(s) > 3 && len(s) < 100 }},
	} {
		// Seed 3 happens to cut 100 bytes in more than 3 reads.
		a, b := h2test.Pipe(h2test.PipeConfig{ChopReads: tc.chop, Seed: 3})
		a.Write(make([]byte, 100))
		a.Close()
		var sizes []int
		buf := make([]byte, 200)
		for {
			n, err := b.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil || n == 0 {
				t.Fatalf("chop %d: Read = %d, %v", tc.chop, n, err)
			}
			sizes = append(sizes, n)
		}
		if !tc.wantSizes(sizes) {
			t.Errorf("chop %d: read sizes %v", tc.chop, sizes)
		}
		b.Close()
	}
}

func TestPipeClose(t *testing.T) {
	a, b := h2test.Pipe(h2test.PipeConfig{})
	a.Write([]byte("tail"))
	a.Close()
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read on the closed end: %v, want net.ErrClosed", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write on the closed end: %v, want net.ErrClosed", err)
	}
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "tail" {
		t.Errorf("remote ReadAll = %q, %v; want what was buffered, then EOF", got, err)
	}
	if _, err := b.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("remote Write: %v, want io.ErrClosedPipe", err)
	}
	if err := a.Close(); err == nil {
		t.Errorf("second Close returned nil")
	}
}

func TestFrameRoundTrip(t *testing.T) {
	b := h2test.AppendFrame(nil, h2frame.TypeGoAway, 0, 0, []byte{0x80, 0, 0, 5, 0, 0, 0, 1, 'h', 'i'})
	b = h2test.AppendFrame(b, h2frame.TypeHeaders, h2frame.FlagPadded|h2frame.FlagPriority|h2frame.FlagEndHeaders, 3|1<<31,
		append([]byte{2, 0, 0, 0, 1, 16, 'x', 'y'}, 0, 0))
	f, rest, ok := h2test.ParseFrame(b)
	if !ok || f.LastStreamID() != 5 || f.ErrCode() != h2frame.ErrCodeProtocol || string(f.DebugData()) != "hi" {
		t.Fatalf("GOAWAY parsed as %v", f)
	}
	f, rest, ok = h2test.ParseFrame(rest)
	if !ok || len(rest) != 0 || f.StreamID != 3 || string(f.BlockFragment()) != "xy" {
		t.Fatalf("HEADERS parsed as %v fragment %q rest %d", f, f.BlockFragment(), len(rest))
	}
	if _, _, ok := h2test.ParseFrame(b[:12]); ok {
		t.Fatalf("ParseFrame accepted a partial frame")
	}
	// EncodeHeaders output decodes with x/net's decoder.
	fs := h2test.Fields(":status", "200", "long", string(bytes.Repeat([]byte("v"), 300)))
	fs = append(fs, lhpack.HeaderField{Name: "secret", Value: "s", Sensitive: true})
	got, err := newXDecoder().DecodeBlock(h2test.EncodeHeaders(fs...))
	if err != nil || len(got) != 3 || got[1] != fs[1] || got[2] != fs[2] {
		t.Fatalf("decoded %+v, %v", got, err)
	}
}

func TestCheckPoolDetectsLeak(t *testing.T) {
	rec := &errRecorder{TB: t}
	pool := newPool()
	var cleanups []func()
	rec.cleanup = func(f func()) { cleanups = append(cleanups, f) }
	h2test.CheckPool(rec, pool)
	b := pool.Get(10)
	synctest.Test(t, func(t *testing.T) { cleanups[0]() }) // fake time: the wait costs nothing
	if rec.msg == "" {
		t.Fatal("CheckPool did not report a leaked buffer")
	}
	b.Free()
	rec.msg = ""
	synctest.Test(t, func(t *testing.T) { cleanups[0]() })
	if rec.msg != "" {
		t.Fatalf("CheckPool reported %q with nothing leaked", rec.msg)
	}
}

func TestCheckGoroutinesDetectsLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &errRecorder{TB: t}
		var cleanups []func()
		rec.cleanup = func(f func()) { cleanups = append(cleanups, f) }
		h2test.CheckGoroutines(rec)
		stop := make(chan struct{})
		go func() { <-stop }()
		cleanups[0]()
		if rec.msg == "" {
			t.Error("CheckGoroutines did not report a leaked goroutine")
		}
		close(stop)
		synctest.Wait()
		rec.msg = ""
		cleanups[0]()
		if rec.msg != "" {
			t.Errorf("CheckGoroutines reported with nothing leaked: %s", rec.msg)
		}
	})
}

type errRecorder struct {
	testing.TB
	msg     string
	cleanup func(func())
}

func (r *errRecorder) Helper()                           {}
func (r *errRecorder) Errorf(format string, args ...any) { r.msg = errorsf(format, args...) }
func (r *errRecorder) Cleanup(f func())                  { r.cleanup(f) }

func errorsf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
func runtime_Goexit()                           { runtime.Goexit() }
func newPool() *bufpool.Pool                    { return bufpool.New(nil) }
