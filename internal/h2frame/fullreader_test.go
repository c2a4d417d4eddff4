package h2frame

import (
	"bytes"
	"io"
	"testing"
)

// fullReady is a fakeReady that also reads the rest of a frame itself
// (FullReader), recording each call's length.
type fullReady struct {
	fakeReady
	fulls []int
}

func (f *fullReady) ReadFull(p []byte) error {
	f.fulls = append(f.fulls, len(p))
	_, err := io.ReadFull(&f.chopReader, p)
	return err
}

// The rest of a large DATA frame goes to a FullReader source in one call;
// a stream that ends inside it is io.ErrUnexpectedEOF.
func TestFullReaderTakesFrameRest(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789"), 20000)
	wire := cat(frameBytes(TypeData, 0, 1, payload), pingWire)
	src := &fullReady{fakeReady: fakeReady{chopReader: chopReader{data: wire, max: 8192}}}
	r := NewReader(src, ReaderConfig{MaxFrameSize: 1 << 20})
	defer r.Close()
	f, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	d := f.(*DataFrame)
	if !bytes.Equal(d.Data.Bytes(), payload) {
		t.Fatal("payload differs")
	}
	d.Data.Free()
	if len(src.fulls) != 1 || src.fulls[0] != len(payload)-(8192-HeaderLen) {
		t.Fatalf("ReadFull calls %v, want one for the %d bytes after the first read", src.fulls, len(payload)-(8192-HeaderLen))
	}
	if f, err := r.ReadFrame(); err != nil || f.Header().Type != TypePing {
		t.Fatalf("after the DATA frame: %v %v", f, err)
	}

	cut := &fullReady{fakeReady: fakeReady{chopReader: chopReader{data: wire[:len(wire)/2], max: 8192}}}
	r2 := NewReader(cut, ReaderConfig{MaxFrameSize: 1 << 20})
	defer r2.Close()
	if _, err := r2.ReadFrame(); err != io.ErrUnexpectedEOF {
		t.Fatalf("stream cut inside the frame: %v, want io.ErrUnexpectedEOF", err)
	}
}
