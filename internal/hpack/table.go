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
	ring    []entry // grows by half, rounded up: 3, 5, 8, 12, 18, ...
	start   uint32  // ring position of the oldest entry
	n       uint32  // number of entries
	size    uint32  // sum of entry sizes (§4.1)
	maxSize uint32  // current maximum size (§4.2)

	// nameHash parallels ring with a hash of each entry's name in the
	// encoder's table (whose adds say hashed) once the ring is longer than
	// linearMax, so that search can skip entries by comparing four bytes
	// instead of loading the strings; nil otherwise.
	// It is behind a pointer so that the decoder's table, and any short
	// one, costs 8 bytes for it rather than 24.
	nameHash *[]uint32
}

// entry is one dynamic table entry (never sensitive: §7.1.3 fields are not
// indexed).
type entry struct{ name, value string }

// len returns the number of entries.
func (t *dynTable) len() int { return int(t.n) }

// at returns the entry with dynamic index i (1 = newest); 1 <= i <= t.n.
func (t *dynTable) at(i int) HeaderField {
	e := t.ring[t.pos(int(t.n)-i)]
	return HeaderField{Name: e.name, Value: e.value}
}

// pos returns the ring position of the k-th oldest entry, 0 <= k < len(ring).
func (t *dynTable) pos(k int) int {
	p := int(t.start) + k
	if p >= len(t.ring) {
		p -= len(t.ring)
	}
	return p
}

// setMaxSize changes the maximum size, evicting the oldest entries until the
// table fits (§4.3).
func (t *dynTable) setMaxSize(max uint32) {
	t.maxSize = max
	t.evictTo(max)
}

// evictTo evicts the oldest entries until size <= limit.
func (t *dynTable) evictTo(limit uint32) {
	for t.size > limit && t.n > 0 {
		e := &t.ring[t.start]
		t.size -= uint32(len(e.name)+len(e.value)) + entryOverhead
		*e = entry{} // drop the strings so the GC can take them
		if t.start++; int(t.start) == len(t.ring) {
			t.start = 0
		}
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
	pos := t.pos(int(t.n))
	t.ring[pos] = entry{f.Name, f.Value}
	if t.nameHash != nil {
		(*t.nameHash)[pos] = hashName(f.Name)
	}
	t.n++
	t.size += sz
}

// grow makes the ring half as long again, keeping the entries in order. The
// ring starts at minRing entries, so that a connection whose peer indexes a few fields
// (gRPC's usual :authority, user-agent and path) holds a few, not a
// 4096-byte table's worth; the name hashes appear once the ring is longer
// than linearMax.
func (t *dynTable) grow(hashed bool) {
	nc := max(len(t.ring)+(len(t.ring)+1)/2, minRing)
	r := make([]entry, nc)
	var h []uint32
	if hashed && nc > linearMax {
		h = make([]uint32, nc)
	}
	for i := 0; i < int(t.n); i++ {
		p := t.pos(i)
		r[i] = t.ring[p]
		switch {
		case h == nil:
		case t.nameHash != nil:
			h[i] = (*t.nameHash)[p]
		default:
			h[i] = hashName(r[i].name)
		}
	}
	t.ring = r
	switch {
	case h == nil:
	case t.nameHash == nil:
		t.nameHash = &h
	default:
		*t.nameHash = h
	}
	t.start = 0
}

// fit shortens the ring to the entries it holds, keeping them in order, for
// a connection going idle: the ring grows by half at a time, so a table of
// six entries (a gRPC client's request fields) sits in a ring of eight, and
// each spare slot is 32 bytes the idle connection holds for nothing. The
// next add grows it again, once.
func (t *dynTable) fit() {
	n := int(t.n)
	if n == len(t.ring) {
		return
	}
	var r []entry
	if n > 0 {
		r = make([]entry, n)
	}
	for i := range r {
		r[i] = t.ring[t.pos(i)]
	}
	if t.nameHash != nil {
		if n > linearMax {
			h := make([]uint32, n)
			for i := range h {
				h[i] = (*t.nameHash)[t.pos(i)]
			}
			*t.nameHash = h
		} else {
			t.nameHash = nil
		}
	}
	t.ring, t.start = r, 0
}

// minRing is the ring's first length: a gRPC server's encoder indexes three
// response fields, a client's five or six request fields.
const minRing = 3

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
	n := int(t.n)
	if n == 0 {
		return 0, false
	}
	// Newest first: the entries are ring[start:newest+1] after ring[0:..]
	// when they wrap; scan each run downwards, without a wrap check.
	newest := t.pos(n - 1)
	hi, lo := newest, max(newest-n+1, 0) // the first run, ring[lo:hi+1]
	i := 1
	var hs []uint32
	if t.nameHash != nil && n > linearMax {
		hs = *t.nameHash
	}
	hashed := hs != nil
	var h uint32
	if hashed {
		h = hashName(name)
	}
	for run := 0; run < 2; run++ {
		for p := hi; p >= lo; p, i = p-1, i+1 {
			if hashed && hs[p] != h {
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
		if i > n {
			break
		}
		hi, lo = len(t.ring)-1, len(t.ring)-(n-i+1) // the wrapped run
	}
	return idx, false
}
