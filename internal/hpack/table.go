package hpack

// entryOverhead is the per-entry overhead of RFC 7541 §4.1.
const entryOverhead = 32

// dynTable is the dynamic table of RFC 7541 §2.3.2 as a ring buffer: adding
// an entry and evicting the oldest are O(1) and move no strings. Index 1 is
// the newest entry. Owned by the Decoder or Encoder that embeds it.
//
// Every connection holds two (its decoder's and its encoder's) for as long
// as it lives, so the table is kept small: entries without HeaderField's
// Sensitive flag (32 bytes, not 40) and 32-bit counters.
type dynTable struct {
	ring    []entry // len is a power of two (or zero)
	start   uint32  // ring position of the oldest entry
	n       uint32  // number of entries
	size    uint32  // sum of entry sizes (§4.1)
	maxSize uint32  // current maximum size (§4.2)

	// nameHash parallels ring with a hash of each entry's name in the
	// encoder's table (whose adds say hashed) once the ring is longer than
	// linearMax, so that search can skip entries by comparing four bytes
	// instead of loading the strings; nil otherwise.
	nameHash []uint32
}

// entry is one dynamic table entry (never sensitive: §7.1.3 fields are not
// indexed).
type entry struct{ name, value string }

// len returns the number of entries.
func (t *dynTable) len() int { return int(t.n) }

// at returns the entry with dynamic index i (1 = newest); 1 <= i <= t.n.
func (t *dynTable) at(i int) HeaderField {
	e := t.ring[(t.start+t.n-uint32(i))&uint32(len(t.ring)-1)]
	return HeaderField{Name: e.name, Value: e.value}
}

// setMaxSize changes the maximum size, evicting the oldest entries until the
// table fits (§4.3).
func (t *dynTable) setMaxSize(max uint32) {
	t.maxSize = max
	t.evictTo(max)
}

// evictTo evicts the oldest entries until size <= limit.
func (t *dynTable) evictTo(limit uint32) {
	mask := uint32(len(t.ring) - 1)
	for t.size > limit && t.n > 0 {
		e := &t.ring[t.start]
		t.size -= uint32(len(e.name)+len(e.value)) + entryOverhead
		*e = entry{} // drop the strings so the GC can take them
		t.start = (t.start + 1) & mask
		t.n--
	}
}

// add inserts f as the newest entry after evicting what §4.4 requires. An
// entry larger than the maximum size empties the table and is not added.
// hashed says the table keeps name hashes (the encoder's).
func (t *dynTable) add(f HeaderField, hashed bool) {
	sz := f.Size()
	if sz > t.maxSize {
		t.evictTo(0)
		return
	}
	t.evictTo(t.maxSize - sz)
	if int(t.n) == len(t.ring) {
		t.grow(hashed)
	}
	pos := (t.start + t.n) & uint32(len(t.ring)-1)
	t.ring[pos] = entry{f.Name, f.Value}
	if t.nameHash != nil {
		t.nameHash[pos] = hashName(f.Name)
	}
	t.n++
	t.size += sz
}

// grow doubles the ring, keeping the entries in order. The ring starts at
// minRing entries, so that a connection whose peer indexes a few fields
// (gRPC's usual :authority, user-agent and path) holds a few, not a
// 4096-byte table's worth; the name hashes appear once the ring is longer
// than linearMax.
func (t *dynTable) grow(hashed bool) {
	nc := 2 * len(t.ring)
	if nc == 0 {
		nc = minRing
	}
	r := make([]entry, nc)
	var h []uint32
	if hashed && nc > linearMax {
		h = make([]uint32, nc)
	}
	mask := len(t.ring) - 1
	for i := 0; i < int(t.n); i++ {
		p := (int(t.start) + i) & mask
		r[i] = t.ring[p]
		switch {
		case h == nil:
		case t.nameHash != nil:
			h[i] = t.nameHash[p]
		default:
			h[i] = hashName(r[i].name)
		}
	}
	t.ring, t.nameHash = r, h
	t.start = 0
}

// minRing is the ring's first length.
const minRing = 4

// hashName is FNV-1a over s: names are short and the hash needs no state.
func hashName(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// linearMax is the table length up to which search compares strings
// directly: hashing the name costs more than scanning a few entries.
// BenchmarkHPACK/Encode/full-table-miss measures the other end.
const linearMax = 16

// search returns the dynamic index of the newest exact match (exact true),
// or of the newest entry with the same name (exact false), or 0. A linear
// scan: with the 4096-byte default the table holds few entries for gRPC
// traffic, and comparing strings by length first makes a miss cheap. Past
// linearMax entries a hashed table scans the name hashes instead (a 4096-byte
// table holds at most 128 entries, so no index structure is needed).
func (t *dynTable) search(name, value string) (idx int, exact bool) {
	mask := len(t.ring) - 1
	pos := int(t.start) + int(t.n) - 1
	n := int(t.n)
	if t.nameHash != nil && n > linearMax {
		h := hashName(name)
		for i := 1; i <= n; i++ {
			p := (pos - i + 1) & mask
			if t.nameHash[p] != h {
				continue
			}
			e := &t.ring[p]
			if e.name == name {
				if e.value == value {
					return i, true
				}
				if idx == 0 {
					idx = i
				}
			}
		}
		return idx, false
	}
	for i := 1; i <= n; i++ {
		e := &t.ring[(pos-i+1)&mask]
		if e.name == name {
			if e.value == value {
				return i, true
			}
			if idx == 0 {
				idx = i
			}
		}
	}
	return idx, false
}
