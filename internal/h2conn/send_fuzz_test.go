package h2conn

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/hpack"
)

// FuzzSend drives a server stream's Send with items the input describes:
// every part combination, data sizes around the frame size and the
// client's window (which the input also sets), Hold and every return
// policy, resets in between. Whatever the items, a send fails only with a
// documented error and then puts nothing on the wire; the client sees no
// connection error; when nothing reset the stream, it gets exactly the
// bytes of the sends that succeeded, in order, then the end; and every
// buffer and goroutine comes back. Without -fuzz it runs the seeds.
func FuzzSend(f *testing.F) {
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{3, 0, 2, 40, 4, 0})                  // headers+data, then trailers
	f.Add([]byte{1, 3, 10, 0, 1, 200, 7, 1})          // a response item
	f.Add([]byte{2, 0, 2, 255, 1, 255, 1, 9, 4, 0})   // data beyond a small window
	f.Add([]byte{0, 1, 0, 0, 5, 0, 1, 7})             // a reset between sends
	f.Add([]byte{0, 6, 6, 2, 6, 5, 6, 4, 6, 0, 1, 3}) // odd part sets
	f.Fuzz(fuzzSendOnce)
}

// fuzzSendOnce is FuzzSend's body for one input.
func fuzzSendOnce(t *testing.T, in []byte) {
	{
		if len(in) > 64 {
			in = in[:64]
		}
		g := runtime.NumGoroutine()
		window := uint32(0) // default
		if len(in) > 0 && in[0]&1 != 0 {
			window = 16 << 10 // so sends wait for window
		}
		got := make(chan *Stream, 1)
		p := newPair(t, Config{InitialStreamWindow: window}, Config{},
			func(*bufpool.Pool) Handler { return HandlerFunc(func(s *Stream) { got <- s }) }, false)
		var stacks atomic.Pointer[string]
		watchdog := time.AfterFunc(5*time.Second, func() {
			buf := make([]byte, 1<<20)
			s := string(buf[:runtime.Stack(buf, true)])
			stacks.Store(&s)
			p.client.Close()
			p.server.Close()
		})
		defer func() {
			watchdog.Stop()
			if s := stacks.Load(); s != nil {
				t.Fatalf("the exchange hung for 5 s; goroutines then:\n%s", *s)
			}
		}()
		cs, err := p.client.NewStream(context.Background(), reqFields("/fuzz"), StreamOptions{EndStream: true})
		if err != nil {
			t.Fatal(err)
		}
		ss := <-got
		type result struct {
			body []byte
			err  error
		}
		recvd := make(chan result, 1)
		go func() {
			if _, end, err := cs.RecvHeaders(); err != nil || end {
				recvd <- result{nil, err}
				return
			}
			b, err := recvAll(cs)
			recvd <- result{b, err}
		}()
		var want []byte
		reset, headers := false, false
		for i := 1; i+1 < len(in); i += 2 {
			it, isReset := fuzzItem(p.pool, in[i], in[i+1])
			if isReset {
				ss.Reset(h2frame.ErrCodeCancel)
				reset = true
				continue
			}
			data := []byte(nil)
			if it.Data != nil && it.Parts&PartData != 0 {
				data = append(data, it.Data.Bytes()...)
			}
			parts := it.Parts
			err := ss.Send(it)
			switch {
			case err == nil:
				want = append(want, data...)
				headers = headers || parts&PartHeaders != 0
			case reset && isStreamErr(err):
			case errors.Is(err, ErrSendClosed), errors.Is(err, ErrHeadersNotSent),
				errors.Is(err, ErrTrailersMustEnd), errors.Is(err, ErrEmptyItem),
				errors.Is(err, ErrPseudoInTrailers), errors.Is(err, ErrNoStatus):
			default:
				t.Fatalf("item %d (parts %03b end %v return %v): %v", i/2, it.Parts, it.End, it.Return, err)
			}
		}
		if !reset {
			// End the response if the items did not: with trailers, or
			// a Trailers-Only response.
			end := trailerFields
			if !headers {
				end = append(append([]hpack.HeaderField(nil), respFields...), trailerFields...)
			}
			if err := ss.Send(TrailersItem(end)); err != nil && !errors.Is(err, ErrSendClosed) {
				t.Fatalf("final trailers: %v", err)
			}
		}
		r := <-recvd
		if !reset {
			if r.err != nil {
				t.Fatalf("client: %v", r.err)
			}
			if !bytes.Equal(r.body, want) {
				t.Fatalf("client got %d bytes, want %d", len(r.body), len(want))
			}
		}
		var e *Error
		if r.err != nil && errors.As(r.err, &e) && e.StreamID == 0 {
			t.Fatalf("connection error: %v", r.err)
		}
		cs.Release()
		ss.Release()
		p.close(t)
		checkLeaks(t, p.pool, g)
	}
}

// fuzzItem makes the item two input bytes describe, or reports a reset.
func fuzzItem(pool *bufpool.Pool, kind, arg byte) (SendItem, bool) {
	size := fuzzSizes[arg>>4&7]
	var data *bufpool.Buffer
	if arg&8 == 0 {
		data = pool.Get(size)
		b := data.Bytes()
		for i := range b {
			b[i] = byte(i) ^ kind
		}
	}
	trls := []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}
	drop := func() {
		if data != nil {
			data.Free() // the item carries none
		}
	}
	var it SendItem
	switch kind % 8 {
	case 0:
		it = HeadersItem(respFields, arg&1 != 0)
		drop()
	case 1, 2:
		it = DataItem(data, arg&1 != 0)
	case 3:
		it = HeadersDataItem(respFields, data, arg&1 != 0)
	case 4:
		it = TrailersItem(trls)
		drop()
	case 5:
		drop()
		return SendItem{}, true
	case 6:
		// Any part set, with whatever fields and data that takes.
		it = SendItem{Parts: Parts(arg & 7), Headers: respFields, Data: data, Trailers: trls, End: arg&1 != 0}
	default:
		it = ResponseItem(respFields, data, trls)
	}
	it.Hold = arg&2 != 0
	if kind >= 8 {
		it.Return = ReturnPolicy(kind >> 3 % 3)
	}
	return it, false
}

// fuzzSizes are the data sizes an item may carry: around a frame, around
// the window the input may set.
var fuzzSizes = [8]int{0, 1, 100, 16384, 16385, 16 << 10 * 2, 70000, 200000}

// isStreamErr reports whether err is the stream's end (a reset, by either
// side).
func isStreamErr(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.StreamID != 0
}
