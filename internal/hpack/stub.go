package hpack

// TEMPORARY: signatures only, so that the frame layer compiles while the
// implementation is written. The implementation replaces this file.

// Decoder decodes header blocks of one connection direction. Not safe for
// concurrent use: the connection's reader owns it.
type Decoder struct{}

// NewDecoder returns a decoder whose dynamic table may grow to maxTableSize
// (our SETTINGS_HEADER_TABLE_SIZE; 4096 by default in HTTP/2).
func NewDecoder(maxTableSize uint32) *Decoder { return &Decoder{} }

// SetAllowedMaxTableSize changes the largest size a peer's dynamic table
// size update may ask for (after we change SETTINGS_HEADER_TABLE_SIZE).
func (d *Decoder) SetAllowedMaxTableSize(n uint32) {}

// SetMaxStringLength bounds one decoded string; longer ones are a
// DecodingError. Zero means no bound beyond the header list limit.
func (d *Decoder) SetMaxStringLength(n int) {}

// Decode decodes one complete header block, calling emit for each field in
// order. The strings in the fields are stable (interned or newly allocated)
// and may be kept. When the decoded list size passes maxListSize (0 means no
// limit) the rest of the block is still decoded but not emitted and Decode
// returns ErrListTooLarge. A malformed block returns a *DecodingError.
func (d *Decoder) Decode(block []byte, maxListSize uint32, emit func(HeaderField)) error {
	panic("hpack: not implemented")
}

// Encoder encodes header blocks of one connection direction. Not safe for
// concurrent use: the connection's writer owns it.
type Encoder struct{}

// NewEncoder returns an encoder with a 4096-byte dynamic table.
func NewEncoder() *Encoder { return &Encoder{} }

// SetPeerMaxTableSize records the peer's SETTINGS_HEADER_TABLE_SIZE. The
// encoder uses min(n, its own cap) and announces a change with a dynamic table
// size update at the start of the next block.
func (e *Encoder) SetPeerMaxTableSize(n uint32) {}

// BeginBlock must start every header block: it appends any pending dynamic
// table size update to dst.
func (e *Encoder) BeginBlock(dst []byte) []byte { panic("hpack: not implemented") }

// AppendField appends the encoding of f to dst and returns the extended
// slice. Sensitive fields are never indexed.
func (e *Encoder) AppendField(dst []byte, f HeaderField) []byte {
	panic("hpack: not implemented")
}
