package hpack

// The Huffman code of RFC 7541 Appendix B is canonical: within one code
// length, codes increase with the symbol, and each length's first code follows
// the last code of the shorter lengths. So the code lengths alone define it;
// init derives the codes and the decoding automaton from them.

// huffLens holds the code length in bits of symbols 0..255 (Appendix B);
// EOS (symbol 256) has length eosLen.
var huffLens = [256]uint8{
	13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
	28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
	6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
	5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
	13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
	7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
	15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
	6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
	20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
	24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
	22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
	21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
	26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
	19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
	20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
	26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
}

const (
	eosSym = 256
	eosLen = 30
)

// huffCodes holds the code of each symbol, right-aligned.
var huffCodes [257]uint32

// The decoder is an automaton over 4-bit input steps. Its states are the
// 256 internal nodes of the code tree (state 0 is the root, i.e. a symbol
// boundary). No code is shorter than 5 bits, so one step completes at most
// one symbol.
type huffStep struct {
	next  uint8
	flags uint8
	sym   uint8
}

const (
	huffEmit = 1 << iota // the step completed symbol sym
	huffFail             // the step decoded EOS: a decoding error (§5.2)
)

var (
	huffDec [256][16]huffStep
	// huffAccept marks the states in which the input may end: the bits
	// since the last symbol are at most 7 and all ones (§5.2 padding).
	huffAccept [256]bool
)

func init() {
	var lens [257]uint8
	copy(lens[:], huffLens[:])
	lens[eosSym] = eosLen

	// Canonical assignment: by length, then by symbol.
	code := uint32(0)
	for l := uint8(1); l <= eosLen; l++ {
		for s := range lens {
			if lens[s] == l {
				huffCodes[s] = code
				code++
			}
		}
		code <<= 1
	}

	// Build the tree. child >= 0 is an internal node, < 0 is leaf -(sym+1).
	type node struct{ child [2]int32 }
	nodes := make([]node, 1, 256)
	for s := range lens {
		n := int32(0)
		for b := int(lens[s]) - 1; b >= 0; b-- {
			bit := (huffCodes[s] >> uint(b)) & 1
			if b == 0 {
				nodes[n].child[bit] = -int32(s) - 1
				break
			}
			c := nodes[n].child[bit]
			if c == 0 {
				nodes = append(nodes, node{})
				c = int32(len(nodes) - 1)
				nodes[n].child[bit] = c
			}
			n = c
		}
	}
	if len(nodes) != 256 {
		panic("hpack: Huffman tree is not complete")
	}

	for s := range nodes {
		for v := 0; v < 16; v++ {
			var st huffStep
			n := int32(s)
			for b := 3; b >= 0; b-- {
				c := nodes[n].child[(v>>uint(b))&1]
				if c < 0 {
					sym := -c - 1
					if sym == eosSym {
						st.flags |= huffFail
					} else {
						st.flags |= huffEmit
						st.sym = uint8(sym)
					}
					n = 0
					continue
				}
				n = c
			}
			st.next = uint8(n)
			huffDec[s][v] = st
		}
	}
	n := int32(0)
	huffAccept[0] = true
	for d := 1; d <= 7; d++ {
		n = nodes[n].child[1]
		huffAccept[n] = true
	}
}

// HuffmanEncodeLength returns the length in bytes of the Huffman encoding
// of s.
func HuffmanEncodeLength(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		n += int(huffLens[s[i]])
	}
	return (n + 7) / 8
}

// AppendHuffman appends the Huffman encoding of s to dst, padded with the
// most significant bits of EOS (ones).
func AppendHuffman(dst []byte, s string) []byte {
	var acc uint64 // the low nbits bits are pending output
	var nbits uint
	for i := 0; i < len(s); i++ {
		c := s[i]
		l := uint(huffLens[c])
		acc = acc<<l | uint64(huffCodes[c])
		nbits += l
		for nbits >= 32 {
			nbits -= 32
			v := uint32(acc >> nbits)
			dst = append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
		}
	}
	for nbits >= 8 {
		nbits -= 8
		dst = append(dst, byte(acc>>nbits))
	}
	if nbits > 0 {
		dst = append(dst, byte(acc<<(8-nbits))|byte(0xff>>nbits))
	}
	return dst
}

// errHuffman is returned for an invalid Huffman string; allocated once since
// it carries no detail.
var errHuffman = &DecodingError{Reason: "invalid Huffman-encoded string"}

// appendHuffmanDecode appends the decoding of src to dst. EOS inside the
// string, or padding that is longer than 7 bits or not all ones, is a
// DecodingError (§5.2).
func appendHuffmanDecode(dst, src []byte) ([]byte, error) {
	state := uint8(0)
	for _, b := range src {
		st := &huffDec[state][b>>4]
		if st.flags != 0 {
			if st.flags&huffFail != 0 {
				return dst, errHuffman
			}
			dst = append(dst, st.sym)
		}
		st = &huffDec[st.next][b&0xf]
		if st.flags != 0 {
			if st.flags&huffFail != 0 {
				return dst, errHuffman
			}
			dst = append(dst, st.sym)
		}
		state = st.next
	}
	if !huffAccept[state] {
		return dst, errHuffman
	}
	return dst, nil
}
