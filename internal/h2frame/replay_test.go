package h2frame

import (
	"bytes"
	"testing"

	"github.com/leangrpc/leangrpc/internal/hpack"
)

// Raw HPACK representations (RFC 7541 §6) for the tests of replay.go.
var (
	// A literal with incremental indexing and a new name: the table
	// changes.
	insertA1 = []byte{0x40, 1, 'a', 1, '1'}
	insertB2 = []byte{0x40, 1, 'b', 1, '2'}
	// The newest dynamic table entry, index 62: leaves the table alone.
	newest = []byte{0x80 | 62}
	// A literal without indexing whose name has an uppercase letter:
	// invalid (RFC 9113 §8.2.1), and the table is untouched.
	upper = []byte{0x00, 1, 'X', 1, 'y'}
)

// headersOf reads the HEADERS frames of the blocks given, in order,
// returning each frame's fields (copied) and checkFields' verdict. Between
// blocks, between(i) may change the Reader.
func headersOf(t *testing.T, r *Reader, n int, between func(i int)) (fields [][]hpack.HeaderField, invalid []string) {
	t.Helper()
	for i := 0; i < n; i++ {
		if between != nil {
			between(i)
		}
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		hf, ok := f.(*HeadersFrame)
		if !ok {
			t.Fatalf("block %d: got %T", i, f)
		}
		fields = append(fields, append([]hpack.HeaderField(nil), hf.Fields...))
		invalid = append(invalid, hf.Invalid)
	}
	return fields, invalid
}

func wireOf(blocks ...[]byte) []byte {
	var wire []byte
	for i, b := range blocks {
		wire = append(wire, frameBytes(TypeHeaders, FlagEndHeaders, uint32(2*i+1), b)...)
	}
	return wire
}

// A block that leaves the table alone is replayed from memory when it
// comes again, and decoded anew once a block changed the table.
func TestReplayedBlockReplayedUntilTableChanges(t *testing.T) {
	r := NewReader(bytes.NewReader(wireOf(insertA1, newest, newest, insertB2, newest)), ReaderConfig{})
	fields, _ := headersOf(t, r, 5, func(i int) {
		if i == 2 {
			// The second read of the same block must come from memory:
			// mark what is remembered so that a replay shows.
			if r.replay == nil || !r.replay.ents[0].ok {
				t.Fatal("the block that left the table alone was not remembered")
			}
			r.replay.ents[0].fields[0].Value = "replayed"
		}
	})
	want := []string{"a:1", "a:1", "a:replayed", "b:2", "b:2"}
	for i, fs := range fields {
		if len(fs) != 1 || fs[0].Name+":"+fs[0].Value != want[i] {
			t.Errorf("block %d: got %v, want %s", i, fs, want[i])
		}
	}
}

// checkFields' verdict comes back with a replayed block.
func TestReplayedBlockKeepsVerdict(t *testing.T) {
	r := NewReader(bytes.NewReader(wireOf(upper, upper)), ReaderConfig{})
	_, invalid := headersOf(t, r, 2, nil)
	if invalid[0] == "" || invalid[1] != invalid[0] {
		t.Fatalf("verdicts %q", invalid)
	}
	if r.replay == nil {
		t.Fatal("not remembered")
	}
}

// A changed header list limit, or a Reader gone idle, decodes anew.
func TestReplayedBlockForgotten(t *testing.T) {
	r := NewReader(bytes.NewReader(wireOf(insertA1, newest, newest, newest)), ReaderConfig{})
	fields, _ := headersOf(t, r, 4, func(i int) {
		switch i {
		case 2:
			r.replay.ents[0].fields[0].Value = "stale"
			r.SetMaxHeaderListSize(1 << 20)
		case 3:
			r.replay.ents[1].fields[0].Value = "stale"
			r.ForgetHeaderBlocks()
			if r.replay != nil {
				t.Fatal("memory kept after ForgetHeaderBlocks")
			}
		}
	})
	for i, fs := range fields[1:] {
		if len(fs) != 1 || fs[0].Value != "1" {
			t.Errorf("block %d: got %v, want a: 1", i+1, fs)
		}
	}
}

// Blocks over the header list limit are not remembered: their fields are
// truncated.
func TestReplayedBlockNotRememberedWhenTruncated(t *testing.T) {
	r := NewReader(bytes.NewReader(wireOf(insertA1, newest)), ReaderConfig{MaxHeaderListSize: 1})
	headersOf(t, r, 2, nil)
	if r.replay != nil {
		t.Fatal("a truncated block was remembered")
	}
}
