package h2frame

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/leangrpc/leangrpc/internal/budget"
)

// TestHeaderBlockBytesBounded: Readers each holding a multi-frame header
// block in progress (a CONTINUATION flood on many connections) together
// hold at most their account's soft level plus one share each: the Reader
// whose block would grow past its share with the account at that level
// fails with ENHANCE_YOUR_CALM, a block within its share still passes, and
// the account comes back to zero as the Readers end.
func TestHeaderBlockBytesBounded(t *testing.T) {
	const limit = 64 << 20
	acct := budget.New(limit)
	soft := acct.Limit() - acct.Limit()/4 // budget's soft level
	const conns, each = 12, 8 << 20       // 96 MiB asked for together
	frag := make([]byte, 1<<20)
	var wire []byte
	wire = append(wire, frameBytes(TypeHeaders, 0, 1, frag)...)
	for len(wire) < each {
		wire = append(wire, frameBytes(TypeContinuation, 0, 1, frag)...)
	}
	type conn struct {
		pw   *io.PipeWriter
		r    *Reader
		errc chan error
	}
	var cs []conn
	refused := 0
	for range conns {
		pr, pw := io.Pipe()
		c := conn{pw, NewReader(pr, ReaderConfig{MaxFrameSize: 1 << 20, Ledger: acct.NewLedger()}), make(chan error, 1)}
		cs = append(cs, c)
		go func() {
			_, err := c.r.ReadFrame()
			pr.CloseWithError(err)
			c.errc <- err
		}()
		// Returns once the Reader took all of it (and waits inside the
		// block) or refused it.
		if _, err := pw.Write(wire); err != nil {
			err := <-c.errc
			c.errc <- err
			if ce := (ConnError{}); !errors.As(err, &ce) || ce.Code != ErrCodeEnhanceYourCalm || ce.Reason != "header_blocks_in_flight" {
				t.Fatalf("reader %d: %v, want ENHANCE_YOUR_CALM header_blocks_in_flight", len(cs), err)
			}
			refused++
		}
		if held := acct.Used(); held > soft+int64(len(cs))*2*headerBlockShare {
			t.Fatalf("%d readers hold %d MiB of header blocks", len(cs), held>>20)
		}
	}
	if want := conns - int(soft/each); refused < want {
		t.Errorf("%d readers with %d MiB blocks each: %d refused, want at least %d", conns, each>>20, refused, want)
	}
	// Within its share, a block passes whatever the sum.
	small := cat(frameBytes(TypeHeaders, 0, 3, make([]byte, 1000)), frameBytes(TypeContinuation, 0, 3, make([]byte, 1000)), frameBytes(TypeContinuation, FlagEndHeaders, 3, nil))
	sl := acct.NewLedger()
	r := NewReader(bytes.NewReader(small), ReaderConfig{Ledger: sl})
	if _, err := r.ReadFrame(); err != nil {
		if ce := (ConnError{}); errors.As(err, &ce) && ce.Reason == "header_blocks_in_flight" {
			t.Errorf("a 2000-byte block refused while others flood: %v", err)
		}
	}
	r.Close()
	sl.Close()
	for _, c := range cs {
		c.pw.Close()
		<-c.errc
		c.r.Close()
		c.r.Ledger().Close() // the connection's end gives back its spare granule
	}
	if held := acct.Used(); held != 0 {
		t.Errorf("ended readers still count %d bytes of header blocks", held)
	}
}
