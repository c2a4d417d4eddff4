package h2frame

import "github.com/leangrpc/leangrpc/internal/hpack"

// Replaying header blocks seen before. A peer that sends the same fields call after
// call, all of them indexed, sends the same bytes each time, and those
// decode to the same fields for as long as the dynamic table does not
// change. The Reader remembers the last few blocks whose decoding left the
// table as it was, with the fields they gave and the verdict of
// checkFields, and replays them: a unary call's three header blocks (the
// request's; the response's headers and trailers) skip HPACK decoding and
// the field checks.
//
// Any decoding that changes the table (an insertion, an eviction, a size
// update) makes everything remembered stale. The memory is dropped when
// the connection goes idle (ForgetHeaderBlocks), so an idle connection
// holds none of it.

const (
	replayEntries   = 2   // a server's request block; a client's response headers and trailers
	maxReplayBlock  = 256 // bytes: longer blocks are not remembered
	maxReplayFields = 16
)

// replayCache is a Reader's memory of header blocks; owned by the Reader.
type replayCache struct {
	gen  uint32 // bumped by every decoding that changed the table
	next int    // the entry the next remembered block replaces
	ents [replayEntries]replayEntry
}

type replayEntry struct {
	ok      bool
	gen     uint32 // replayCache.gen when decoded
	maxList uint32 // the header list limit it was decoded under
	block   []byte // a copy of the encoded block
	fields  []hpack.HeaderField
	invalid string // checkFields' verdict
}

// replayBlock appends to f.Fields the fields of block if it was remembered,
// and returns checkFields' verdict on them; ok is false otherwise.
func (r *Reader) replayBlock(block []byte, f *HeadersFrame) (invalid string, ok bool) {
	s := r.replay
	if s == nil || len(block) > maxReplayBlock {
		return "", false
	}
	for i := range s.ents {
		e := &s.ents[i]
		if e.ok && e.gen == s.gen && e.maxList == r.maxList && string(e.block) == string(block) {
			f.Fields = append(f.Fields, e.fields...)
			return e.invalid, true
		}
	}
	return "", false
}

// decodeBlock decodes block with the HPACK decoder, keeping the memory of
// blocks seen in step with the table.
func (r *Reader) decodeBlock(block []byte) (changed bool, err error) {
	changed, err = r.dec.DecodeReport(block, r.maxList, r.emitFn)
	if changed && r.replay != nil {
		r.replay.gen++
	}
	return changed, err
}

// rememberBlock remembers block, which decoded to fields without changing
// the table, with checkFields' verdict.
func (r *Reader) rememberBlock(block []byte, fields []hpack.HeaderField, invalid string) {
	if len(block) > maxReplayBlock || len(fields) > maxReplayFields {
		return
	}
	s := r.replay
	if s == nil {
		s = new(replayCache)
		r.replay = s
	}
	e := &s.ents[s.next]
	s.next = (s.next + 1) % replayEntries
	clear(e.fields) // drop the strings of the block it replaces
	e.ok, e.gen, e.maxList, e.invalid = true, s.gen, r.maxList, invalid
	e.block = append(e.block[:0], block...)
	e.fields = append(e.fields[:0], fields...)
}

// ForgetHeaderBlocks drops the memory of header blocks seen, for a
// connection about to go idle.
func (r *Reader) ForgetHeaderBlocks() { r.replay = nil }

// FitHeaderTable shortens the HPACK decoder's table storage to its entries,
// for a connection going idle; the entries, which the peer refers to, stay.
func (r *Reader) FitHeaderTable() { r.dec.FitTable() }
