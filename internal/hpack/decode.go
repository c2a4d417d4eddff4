package hpack

import (
	"math"
	"sync"
)

// Decoder decodes header blocks of one connection direction. Not safe for
// concurrent use: the connection's reader owns it.
type Decoder struct {
	table      dynTable // the peer encoder's dynamic table, mirrored
	allowedMax uint32   // largest size a dynamic table size update may set
	maxStrLen  int32    // bound on one decoded string; 0 means none
	// sc is the scratch space, taken from scratchPool by Decode and put
	// back by ReleaseScratch (nil meanwhile); owned by the Decoder while
	// it holds it.
	sc *decodeScratch
}

// decodeScratch is a Decoder's scratch space.
type decodeScratch struct {
	huff []byte // Huffman output; valid until the next field
	join []byte // name and value joined for a single allocation
	// changed records that the block being decoded changed the dynamic
	// table (DecodeReport); here rather than in the Decoder, which every
	// connection holds for good.
	changed bool
}

// scratchPool holds the scratch space of idle decoders.
var scratchPool = sync.Pool{New: func() any { return new(decodeScratch) }}

// ReleaseScratch hands the decoder's scratch space to a pool that all
// decoders share, so that an idle connection holds none; the next Decode
// takes some back. The dynamic table is kept: the peer refers to it.
func (d *Decoder) ReleaseScratch() {
	sc := d.sc
	if sc == nil {
		return
	}
	sc.huff, sc.join = sc.huff[:0], sc.join[:0]
	d.sc = nil
	scratchPool.Put(sc)
}

// FitTable shortens the dynamic table's storage to the entries it holds, for
// a connection going idle; the entries stay.
func (d *Decoder) FitTable() { d.table.fit() }

// NewDecoder returns a decoder whose dynamic table may grow to maxTableSize
// (our SETTINGS_HEADER_TABLE_SIZE; 4096 by default in HTTP/2). A connection
// starts with 4096, the value the peer assumes until it has our SETTINGS, and
// calls SetAllowedMaxTableSize when the peer acknowledges another value.
func NewDecoder(maxTableSize uint32) *Decoder {
	d := &Decoder{allowedMax: maxTableSize}
	d.table.maxSize = maxTableSize
	return d
}

// SetAllowedMaxTableSize changes the largest size a peer's dynamic table
// size update may ask for (after we change SETTINGS_HEADER_TABLE_SIZE). Call
// it when the peer acknowledges the SETTINGS frame: blocks the peer encoded
// before that still use the old size. If the peer's table is then larger
// than n, the next block must start with a size update that brings it to at
// most n (RFC 7541 §4.2), else Decode returns a DecodingError.
func (d *Decoder) SetAllowedMaxTableSize(n uint32) { d.allowedMax = n }

// SetMaxStringLength bounds one decoded string; longer ones are a
// DecodingError. Zero means no bound beyond the header list limit.
func (d *Decoder) SetMaxStringLength(n int) { d.maxStrLen = int32(min(max(n, 0), math.MaxInt32)) }

// TableSize returns the current size of the dynamic table (RFC 7541 §4.1)
// and its current maximum size.
func (d *Decoder) TableSize() (size, maxSize uint32) { return d.table.size, d.table.maxSize }

// Errors without detail are allocated once.
var (
	errTruncated     = &DecodingError{Reason: "header block ends inside a field"}
	errIntOverflow   = &DecodingError{Reason: "integer larger than 2^32-1 or too long"}
	errIndexZero     = &DecodingError{Reason: "index 0"}
	errIndexRange    = &DecodingError{Reason: "index beyond the static and dynamic tables"}
	errStringLength  = &DecodingError{Reason: "string literal longer than the rest of the block"}
	errStringLimit   = &DecodingError{Reason: "string literal longer than the limit"}
	errLateUpdate    = &DecodingError{Reason: "dynamic table size update after a header field"}
	errUpdateTooBig  = &DecodingError{Reason: "dynamic table size update above the allowed maximum"}
	errMissingUpdate = &DecodingError{Reason: "missing dynamic table size update after SETTINGS_HEADER_TABLE_SIZE was lowered"}
)

// maxContinuation bounds the continuation bytes of an integer: five carry 35
// bits, more than the 32 any value we accept needs.
const maxContinuation = 5

// readInt decodes an integer with an n-bit prefix (RFC 7541 §5.1) starting
// at p[0]; len(p) > 0. Values above 2^32-1 are rejected.
func readInt(p []byte, n uint) (uint64, []byte, error) {
	mask := uint64(1)<<n - 1
	v := uint64(p[0]) & mask
	if v < mask {
		return v, p[1:], nil
	}
	p = p[1:]
	shift := uint(0)
	for i, b := range p {
		if i == maxContinuation {
			return 0, nil, errIntOverflow
		}
		v += uint64(b&0x7f) << shift
		if v > math.MaxUint32 {
			return 0, nil, errIntOverflow
		}
		if b&0x80 == 0 {
			return v, p[i+1:], nil
		}
		shift += 7
	}
	return 0, nil, errTruncated
}

// readString decodes a string literal (RFC 7541 §5.2) at the start of p. The
// result is borrowed from p or from d.sc.huff, valid until the next field.
func (d *Decoder) readString(p []byte) ([]byte, []byte, error) {
	if len(p) == 0 {
		return nil, nil, errTruncated
	}
	huff := p[0]&0x80 != 0
	n, p, err := readInt(p, 7)
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(len(p)) {
		return nil, nil, errStringLength
	}
	raw, rest := p[:n], p[n:]
	if !huff {
		if d.maxStrLen > 0 && len(raw) > int(d.maxStrLen) {
			return nil, nil, errStringLimit
		}
		return raw, rest, nil
	}
	// A Huffman code is at least 5 bits, so n bytes decode to at least
	// n*8/30 and at most n*8/5 bytes: reject before decoding when even the
	// shortest outcome is too long.
	if d.maxStrLen > 0 && (len(raw)*8-7)/30 > int(d.maxStrLen) {
		return nil, nil, errStringLimit
	}
	sc := d.sc
	start := len(sc.huff)
	sc.huff, err = appendHuffmanDecode(sc.huff, raw)
	if err != nil {
		return nil, nil, err
	}
	out := sc.huff[start:]
	if d.maxStrLen > 0 && len(out) > int(d.maxStrLen) {
		return nil, nil, errStringLimit
	}
	return out, rest, nil
}

// lookup returns the field at HPACK index i (static then dynamic, §2.3.3).
func (d *Decoder) lookup(i uint64) (HeaderField, error) {
	switch {
	case i == 0:
		return HeaderField{}, errIndexZero
	case i <= uint64(staticLen):
		return staticTable[i], nil
	case i-uint64(staticLen) <= uint64(d.table.len()):
		return d.table.at(int(i) - staticLen), nil
	}
	return HeaderField{}, errIndexRange
}

// stableString returns b as a string that may be kept: an interned one when
// b is in the vocabulary (ok true), else "" and false.
func stableString(b []byte) (string, bool) {
	if len(b) == 0 {
		return "", true
	}
	return intern(b)
}

// makeStrings turns a literal name and value into strings that may be kept,
// with at most one allocation for both.
func (d *Decoder) makeStrings(nameB, valB []byte) (string, string) {
	name, nok := stableString(nameB)
	val, vok := stableString(valB)
	switch {
	case nok && vok:
	case nok:
		val = string(valB)
	case vok:
		name = string(nameB)
	default:
		sc := d.sc
		sc.join = append(append(sc.join[:0], nameB...), valB...)
		s := string(sc.join)
		name, val = s[:len(nameB)], s[len(nameB):]
	}
	return name, val
}

// Decode decodes one complete header block, calling emit for each field in
// order. The strings in the fields are stable (interned or newly allocated)
// and may be kept. When the decoded list size passes maxListSize (0 means no
// limit) or the bound on its size relative to the block's (limits.go), the
// rest of the block is still decoded but not emitted and Decode returns
// ErrListTooLarge. A malformed block returns a *DecodingError.
//
// Decode borrows block until return. A field past the limit is never turned
// into strings unless the dynamic table must store it, so the memory held
// stays bounded by the limit plus the table size.
func (d *Decoder) Decode(block []byte, maxListSize uint32, emit func(HeaderField)) error {
	_, err := d.DecodeReport(block, maxListSize, emit)
	return err
}

// DecodeReport is Decode that also reports whether the block changed the
// dynamic table (an insertion, an eviction or a size update), including a
// block that failed part way. A block that did not decodes to the same
// fields as long as the table does not change: the frame reader replays
// such blocks from memory (h2frame's replay.go).
func (d *Decoder) DecodeReport(block []byte, maxListSize uint32, emit func(HeaderField)) (changed bool, err error) {
	if d.sc == nil {
		d.sc = scratchPool.Get().(*decodeScratch)
	}
	d.sc.changed = false
	err = d.decode(block, maxListSize, emit)
	changed = d.sc.changed
	// An idle connection should not keep the scratch space of one large
	// header alive.
	if cap(d.sc.huff) > maxKeptScratch {
		d.sc.huff = nil
	}
	if cap(d.sc.join) > maxKeptScratch {
		d.sc.join = nil
	}
	return changed, err
}

// maxKeptScratch is the largest scratch buffer kept between blocks.
const maxKeptScratch = 4096

func (d *Decoder) decode(block []byte, maxListSize uint32, emit func(HeaderField)) error {
	p := block
	limit := d.listBudget(len(block))
	if maxListSize != 0 && uint64(maxListSize) < limit {
		limit = uint64(maxListSize)
	}
	var listSize uint64
	over := false
	atStart := true
	for len(p) > 0 {
		b := p[0]
		if b&0xe0 == 0x20 { // dynamic table size update, §6.3
			if !atStart {
				return errLateUpdate
			}
			v, rest, err := readInt(p, 5)
			if err != nil {
				return err
			}
			if v > uint64(d.allowedMax) {
				return errUpdateTooBig
			}
			d.table.setMaxSize(uint32(v))
			d.sc.changed = true
			p = rest
			continue
		}
		if atStart {
			atStart = false
			if d.table.maxSize > d.allowedMax {
				return errMissingUpdate
			}
		}

		if b&0x80 != 0 { // indexed field, §6.1
			i, rest, err := readInt(p, 7)
			if err != nil {
				return err
			}
			// lookup, written out: the hottest line of decoding.
			var f HeaderField
			switch {
			case i-1 < uint64(staticLen): // 1 <= i <= staticLen
				f = staticTable[i]
			case i > uint64(staticLen) && i-uint64(staticLen) <= uint64(d.table.n):
				f = d.table.at(int(i) - staticLen)
			case i == 0:
				return errIndexZero
			default:
				return errIndexRange
			}
			p = rest
			listSize += uint64(f.Size())
			if listSize > limit {
				over = true
			}
			if !over {
				emit(f)
			}
			continue
		}

		// Literal field, §6.2.
		var prefix uint
		indexing, sensitive := false, false
		switch {
		case b&0xc0 == 0x40:
			prefix, indexing = 6, true
		case b&0xf0 == 0x10:
			prefix, sensitive = 4, true
		default:
			prefix = 4
		}
		i, rest, err := readInt(p, prefix)
		if err != nil {
			return err
		}
		p = rest
		d.sc.huff = d.sc.huff[:0]
		var name string
		var nameB []byte
		nameKnown := i != 0
		if nameKnown {
			f, err := d.lookup(i)
			if err != nil {
				return err
			}
			name = f.Name
		} else {
			nameB, p, err = d.readString(p)
			if err != nil {
				return err
			}
		}
		valB, rest, err := d.readString(p)
		if err != nil {
			return err
		}
		p = rest

		nameLen := len(name)
		if !nameKnown {
			nameLen = len(nameB)
		}
		size := uint64(nameLen + len(valB) + entryOverhead)
		listSize += size
		if listSize > limit {
			over = true
		}
		store := indexing && size <= uint64(d.table.maxSize)
		if indexing && !store {
			d.table.evictTo(0) // §4.4: a too-large entry empties the table
			d.sc.changed = true
		}
		if over && !store {
			continue
		}
		var val string
		if nameKnown {
			var ok bool
			if val, ok = stableString(valB); !ok {
				val = string(valB)
			}
		} else {
			name, val = d.makeStrings(nameB, valB)
		}
		if store {
			if !nameKnown {
				name = shared(name)
			}
			val = shared(val)
			d.table.add(HeaderField{Name: name, Value: val}, false)
			d.sc.changed = true
		}
		if !over {
			emit(HeaderField{Name: name, Value: val, Sensitive: sensitive})
		}
	}
	if atStart && d.table.maxSize > d.allowedMax {
		return errMissingUpdate
	}
	if over {
		return ErrListTooLarge
	}
	return nil
}
