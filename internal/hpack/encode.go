package hpack

// defaultTableSize is the HTTP/2 default SETTINGS_HEADER_TABLE_SIZE and the
// encoder's own cap: a larger table costs memory on every connection for a
// small gain on gRPC's short header lists.
const defaultTableSize = 4096

// Encoder encodes header blocks of one connection direction. Not safe for
// concurrent use: the connection's writer owns it.
type Encoder struct {
	table        dynTable // the peer decoder's view of our table
	maxCap       uint32   // our own cap on the table size
	pending      bool     // a size update must start the next block
	pendingMin   uint32   // smallest size since the last block (§4.2)
	pendingFinal uint32   // size to announce last
}

// NewEncoder returns an encoder with a 4096-byte dynamic table.
func NewEncoder() *Encoder {
	e := &Encoder{maxCap: defaultTableSize}
	e.table.maxSize = defaultTableSize
	return e
}

// SetPeerMaxTableSize records the peer's SETTINGS_HEADER_TABLE_SIZE. The
// encoder uses min(n, its own cap) and announces a change with a dynamic table
// size update at the start of the next block.
func (e *Encoder) SetPeerMaxTableSize(n uint32) {
	size := min(n, e.maxCap)
	if !e.pending {
		if size == e.table.maxSize {
			return
		}
		e.pending = true
		e.pendingMin = size
	}
	e.pendingMin = min(e.pendingMin, size)
	e.pendingFinal = size
}

// FitTable shortens the dynamic table's storage to the entries it holds, for
// a connection going idle; the entries stay.
func (e *Encoder) FitTable() { e.table.fit() }

// TableSize returns the current size of the dynamic table (RFC 7541 §4.1)
// and its current maximum size.
func (e *Encoder) TableSize() (size, maxSize uint32) { return e.table.size, e.table.maxSize }

// BeginBlock must start every header block: it appends any pending dynamic
// table size update to dst. When the size went down and back up since the
// last block, it announces the minimum and then the final size, as RFC 7541
// §4.2 requires, so that the peer evicts what we evicted.
func (e *Encoder) BeginBlock(dst []byte) []byte {
	if !e.pending {
		return dst
	}
	e.pending = false
	if e.pendingMin < e.pendingFinal {
		dst = appendInt(dst, 0x20, 5, uint64(e.pendingMin))
		e.table.setMaxSize(e.pendingMin)
	}
	e.table.setMaxSize(e.pendingFinal)
	return appendInt(dst, 0x20, 5, uint64(e.pendingFinal))
}

// AppendField appends the encoding of f to dst and returns the extended
// slice. Sensitive fields are never indexed. An indexed field's strings are
// kept in the dynamic table, so they must be immutable (never an unsafe view
// of a reused buffer).
//
// A field found whole in the static or dynamic table is sent as an index.
// Otherwise it is sent as a literal (its name indexed when possible) and
// added to the dynamic table unless shouldIndex says its value will not
// repeat.
func (e *Encoder) AppendField(dst []byte, f HeaderField) []byte {
	nameIdx, exact := searchStatic(f.Name, f.Value)
	if exact && !f.Sensitive {
		return appendInt(dst, 0x80, 7, uint64(nameIdx))
	}
	if e.table.n > 0 && (!f.Sensitive || nameIdx == 0) {
		i, dexact := e.table.search(f.Name, f.Value)
		if dexact && !f.Sensitive {
			return appendInt(dst, 0x80, 7, uint64(staticLen+i))
		}
		if nameIdx == 0 && i != 0 {
			nameIdx = staticLen + i
		}
	}
	switch {
	case f.Sensitive:
		return appendLiteral(dst, 0x10, 4, nameIdx, f)
	case e.shouldIndex(f):
		dst = appendLiteral(dst, 0x40, 6, nameIdx, f)
		e.table.add(f, true)
		return dst
	default:
		return appendLiteral(dst, 0x00, 4, nameIdx, f)
	}
}

// shouldIndex decides whether a literal field goes into the dynamic table.
func (e *Encoder) shouldIndex(f HeaderField) bool {
	// A field larger than a quarter of the table would evict several
	// entries that do repeat (content-type, :path, user-agent...), while
	// large values (tokens, serialized status details) rarely repeat
	// exactly; sending it without indexing keeps the table useful. This
	// also covers a zero-size table.
	if f.Size() > e.table.maxSize/4 {
		return false
	}
	switch f.Name {
	case "grpc-timeout", // the remaining deadline differs on every call
		"grpc-trace-bin", "traceparent", "x-request-id", // per-call ids
		"grpc-status-details-bin", // per-error payload
		"content-length", "date":
		return false
	}
	// Everything else, :path included: a client calls few methods many
	// times, so paths repeat.
	return true
}

// AppendStatic appends the encoding of f using the static table only: an
// index for an exact static match, else a literal without indexing (never
// indexed if f is Sensitive). It never reads or changes the dynamic table,
// so the bytes may be computed once and reused in any block of any
// connection, after that block's BeginBlock.
func (e *Encoder) AppendStatic(dst []byte, f HeaderField) []byte {
	return appendStatic(dst, f)
}

// EncodeStaticBlock returns the fields encoded as by AppendStatic, for
// constant header blocks built once (":status: 200", "content-type:
// application/grpc", "grpc-status: 0"). The result has no size update: send
// BeginBlock's output first.
func EncodeStaticBlock(fields ...HeaderField) []byte {
	var dst []byte
	for _, f := range fields {
		dst = appendStatic(dst, f)
	}
	return dst
}

func appendStatic(dst []byte, f HeaderField) []byte {
	i, exact := searchStatic(f.Name, f.Value)
	if exact && !f.Sensitive {
		return appendInt(dst, 0x80, 7, uint64(i))
	}
	if f.Sensitive {
		return appendLiteral(dst, 0x10, 4, i, f)
	}
	return appendLiteral(dst, 0x00, 4, i, f)
}

// appendLiteral appends a literal field representation (§6.2): the pattern
// bits, the name index in an n-bit prefix (0: literal name) and the strings.
func appendLiteral(dst []byte, pattern byte, n uint, nameIdx int, f HeaderField) []byte {
	dst = appendInt(dst, pattern, n, uint64(nameIdx))
	if nameIdx == 0 {
		dst = appendString(dst, f.Name)
	}
	return appendString(dst, f.Value)
}

// appendString appends a string literal (§5.2), Huffman-encoded only when
// that is shorter.
func appendString(dst []byte, s string) []byte {
	if hl := HuffmanEncodeLength(s); hl < len(s) {
		dst = appendInt(dst, 0x80, 7, uint64(hl))
		return AppendHuffman(dst, s)
	}
	dst = appendInt(dst, 0, 7, uint64(len(s)))
	return append(dst, s...)
}

// appendInt appends v as an integer with an n-bit prefix (§5.1); pattern
// holds the representation's bits above the prefix.
func appendInt(dst []byte, pattern byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(dst, pattern|byte(v))
	}
	dst = append(dst, pattern|byte(max))
	v -= max
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}
