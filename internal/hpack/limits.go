package hpack

// Decoding work is bounded by the block's size on the wire as well as by the
// header list limit the caller gives. Without the first bound a block of a
// few KiB that references one large dynamic table entry thousands of times
// (an "HPACK bomb") decodes, and is checked and copied by the layers above,
// up to the list limit (16 MiB by default in gRPC) before it is refused: the
// work of a block would follow the limit, not what the peer sent.
//
// A block may decode to at most
//
//	listFloor + 2×(largest dynamic table size) + listPerWireByte×(block length)
//
// bytes of header list (as RFC 9113 §6.5.2 counts them); past that, Decode
// treats it as a list over the limit (ErrListTooLarge: the rest of the block
// is decoded without emitting, so the table stays in sync, and the caller
// refuses the one request). The bound is generous for what encoders send:
//
//   - Literal fields cannot amplify much: a field costs 32 bytes of list
//     overhead plus its name and value, and takes at least two bytes on the
//     wire with an indexed name (the longest static name is 27 bytes) or
//     three with a literal one, and Huffman coding shrinks a string to no
//     less than 5/8 of its length; so blocks of literals stay under 30 bytes
//     of list per wire byte.
//   - Indexed fields amplify: one byte may name an entry as large as the
//     table. A list counts a field as the table counts an entry, so a block
//     that references each entry of the table once decodes to at most the
//     table's size, and one that also inserts entries as it goes to under
//     twice that; the static table's 61 entries add 2636 bytes. Only a
//     block that references entries many times, which no encoder needs,
//     reaches the bound.
//   - The floor covers ordinary requests (a gRPC request is a few hundred
//     bytes of list) and encoders that repeat a field now and then.
//
// So a block's decoding costs at most a constant times its wire size plus
// the floor, whatever the list limit.
const (
	// listPerWireByte is the list bytes a block may decode to per byte it
	// takes on the wire.
	listPerWireByte = 32
	// listFloor is the list size every block may decode to.
	listFloor = 64 << 10
)

// listBudget returns the largest list size a block of n bytes may decode to.
func (d *Decoder) listBudget(n int) uint64 {
	table := max(d.allowedMax, d.table.maxSize)
	return listFloor + 2*uint64(table) + listPerWireByte*uint64(n)
}
