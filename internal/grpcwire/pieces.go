package grpcwire

import (
	"math"
	"sync"
	"unicode/utf8"

	"github.com/leangrpc/leangrpc/internal/bufpool"
	"github.com/leangrpc/leangrpc/internal/h2conn"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Large messages in pieces.
//
// Marshaling copies every bytes field into the buffer that goes to the
// wire. For a message carrying a large blob that copy is most of what
// sending it costs in user space, and the raw TCP floor does not pay it.
// grpc-go's contract lets a sender read the blob where it lies instead: a
// message must not be modified after SendMsg. So a message of at least
// piecesMin bytes, sent with grpc-go's proto codec and no compressor, is
// marshaled into pieces: pooled buffers holding the prefix and the small
// fields, marshaled as proto.Marshal writes them, and between them buffers
// that wrap each bytes field of at least referenceMin bytes
// (bufpool.Wrap), in the order proto.Marshal writes the fields (field
// number, unknown fields last), so that the bytes on the wire are those
// proto.Marshal gives (FuzzPieces checks it). Bytes fields inside a large
// singular message field are found the same way.
//
// The pieces go out as consecutive DATA writes of the stream, so the
// message costs an extra frame header or two. The sender waits until the
// engine has let go of every wrapped piece (its bytes are in the socket,
// or the stream failed and it was dropped) before SendMsg returns: grpc-go
// copies, so callers reuse a buffer once SendMsg returned, and that must
// not change what goes out.
//
// A message whose type has extension ranges or required fields is
// marshaled whole: proto.Marshal writes extensions before the fields, in
// an order of its own, and refuses a message that lacks a required field.

// piecesMin is the least payload size that is considered for pieces: below
// it the copy costs less than the extra DATA write and the wait for the
// flush (side by side at 64 KiB the pieces cost CPU; at 1 MB they save it).
const piecesMin = 512 << 10

// referenceMin is the least length of a bytes field that is referenced
// rather than copied.
const referenceMin = 256 << 10

// firstPieceData is how much of the first referenced field is copied into
// the first piece: the smallest frame a peer may allow (16 KiB).
const firstPieceData = 16 << 10

// maxReferenced bounds the referenced fields of one message; later large
// fields are copied.
const maxReferenced = 8

// maxRuns bounds the message types whose runs a pooled pieces keeps.
const maxRuns = 4

// pieces is a message marshaled in pieces, ready for the wire. bufs[0]
// begins with the 5-byte prefix; every buffer is owned by pieces until the
// caller takes it. Pooled (piecesPool).
type pieces struct {
	bufs     []*bufpool.Buffer
	arr      [2*maxReferenced + 1]*bufpool.Buffer
	wraps    [maxReferenced]bufpool.Buffer // the wrapped ones (bufpool.Wrap)
	refs     int                           // how many of bufs wrap a field of the message
	released chan struct{}                 // one value per wrapped buffer let go
	size     int                           // the payload's length, prefix excluded

	// The state of marshaling.
	scratch   []byte    // the small bytes, prefix first
	segs      []segment // where the pieces are, in order
	segArr    [2*maxReferenced + 1]segment
	fields    []protoreflect.FieldDescriptor
	runs      []protoreflect.Message         // empty messages to gather small fields in (runOf)
	runFields []protoreflect.FieldDescriptor // the fields set in the run being gathered
	mark      int                            // where the small segment being written begins in scratch
	nref      int                            // the fields referenced so far
	min       int                            // referenceMin, or a test's
	head      int                            // firstPieceData, or a test's
}

// segment is one piece: scratch[lo:hi], or ref when it is not nil.
type segment struct {
	lo, hi int
	ref    []byte
}

var piecesPool = sync.Pool{New: func() any {
	p := &pieces{released: make(chan struct{}, maxReferenced)}
	p.bufs, p.segs = p.arr[:0], p.segArr[:0]
	return p
}}

// Released is called by the last Free of each wrapped buffer.
func (p *pieces) Released() { p.released <- struct{}{} }

// marshalPieces marshals m, whose payload is size bytes (proto.Size), in
// pieces, referencing its bytes fields of at least min bytes but for the
// first head bytes of the first one (firstPieceData), which are copied. It returns
// nil when m has none, has extensions set, or changed while being
// marshaled (size no longer holds): the caller marshals it whole.
func marshalPieces(pool *bufpool.Pool, m proto.Message, size, min, head int) *pieces {
	p := piecesPool.Get().(*pieces)
	p.min, p.head = min, head
	p.scratch = append(p.scratch[:0], 0, 0, 0, 0, 0) // the prefix, written last
	ok := p.message(m.ProtoReflect())
	if ok && len(p.segs) > 0 {
		p.cut(len(p.scratch))
		n := 0
		for _, s := range p.segs {
			n += s.hi - s.lo + len(s.ref)
		}
		ok = n == PrefixLen+size
	}
	if !ok || len(p.segs) == 0 {
		p.reset()
		piecesPool.Put(p)
		return nil
	}
	PutPrefix(p.scratch, false, uint32(size))
	for _, s := range p.segs {
		switch {
		case s.ref != nil:
			p.bufs = append(p.bufs, pool.Wrap(&p.wraps[p.refs], s.ref, p))
			p.refs++
		case s.hi > s.lo:
			p.bufs = append(p.bufs, pool.Copy(p.scratch[s.lo:s.hi]))
		}
	}
	p.size = size
	return p
}

// message appends m's fields, in proto.Marshal's order, to the pieces.
func (p *pieces) message(m protoreflect.Message) bool {
	md := m.Descriptor()
	if md.ExtensionRanges().Len() > 0 || md.RequiredNumbers().Len() > 0 {
		// Extensions, if any are set, go first (see above); required
		// fields proto.Marshal checks, and refuses a message without.
		return false
	}
	first := len(p.fields)
	fds := md.Fields()
	for i := range fds.Len() {
		if fd := fds.Get(i); m.Has(fd) {
			// In field-number order, as proto.Marshal writes them
			// (declarations need not be): an insertion sort, since
			// fields are few and usually declared in order already.
			j := len(p.fields)
			p.fields = append(p.fields, fd)
			for ; j > first && p.fields[j-1].Number() > fd.Number(); j-- {
				p.fields[j] = p.fields[j-1]
			}
			p.fields[j] = fd
		}
	}
	fields := p.fields[first:]
	defer func() { p.fields = p.fields[:first] }()
	var run protoreflect.Message // the small fields since the last piece
	for _, fd := range fields {
		v := m.Get(fd)
		if fd.Cardinality() != protoreflect.Repeated {
			switch fd.Kind() {
			case protoreflect.BytesKind:
				if b := v.Bytes(); len(b) >= p.min && p.nref < maxReferenced {
					if !p.flush(&run) {
						return false
					}
					p.scratch = protowire.AppendTag(p.scratch, fd.Number(), protowire.BytesType)
					p.scratch = protowire.AppendVarint(p.scratch, uint64(len(b)))
					if p.nref == 0 {
						// The first frame carries a frame's worth of the
						// field behind the prefix, as it would without
						// pieces: a receiver that sizes its message
						// buffer from the first frame (ours, Parser.Sink)
						// does not see a tiny frame and gather the rest
						// in buffers it must grow.
						k := min(len(b), p.head)
						p.scratch = append(p.scratch, b[:k]...)
						b = b[k:]
					}
					p.nref++
					if len(b) > 0 {
						p.cut(len(p.scratch))
						p.segs = append(p.segs, segment{ref: b})
					}
					continue
				}
			case protoreflect.MessageKind:
				sub := v.Message()
				if n := proto.Size(sub.Interface()); n >= p.min && p.nref < maxReferenced {
					if !p.flush(&run) {
						return false
					}
					p.scratch = protowire.AppendTag(p.scratch, fd.Number(), protowire.BytesType)
					p.scratch = protowire.AppendVarint(p.scratch, uint64(n))
					if !p.message(sub) {
						return false
					}
					continue
				}
			}
		}
		if fd.Cardinality() != protoreflect.Repeated && direct(fd, v) {
			if !p.flush(&run) {
				return false
			}
			p.scratch = appendScalar(p.scratch, fd, v)
			continue
		}
		if run == nil {
			run = p.runOf(m)
		}
		run.Set(fd, v)
		p.runFields = append(p.runFields, fd)
	}
	if !p.flush(&run) {
		return false
	}
	p.scratch = append(p.scratch, m.GetUnknown()...)
	return true
}

// flush marshals the small fields gathered in *run onto the scratch, and
// empties *run for its next use.
func (p *pieces) flush(run *protoreflect.Message) bool {
	r := *run
	if r == nil {
		return true
	}
	*run = nil
	var err error
	p.scratch, err = proto.MarshalOptions{}.MarshalAppend(p.scratch, r.Interface())
	for _, fd := range p.runFields {
		r.Clear(fd)
	}
	clear(p.runFields)
	p.runFields = p.runFields[:0]
	return err == nil
}

// runOf returns an empty message of m's type to gather small fields in:
// one kept from an earlier message of the type, or a new one. A run is
// flushed before the next begins, so one per type is enough.
func (p *pieces) runOf(m protoreflect.Message) protoreflect.Message {
	md := m.Descriptor()
	for _, r := range p.runs {
		if r.Descriptor() == md {
			return r
		}
	}
	r := m.New()
	if len(p.runs) < maxRuns {
		p.runs = append(p.runs, r)
	}
	return r
}

// cut ends the small segment being written at scratch[:hi].
func (p *pieces) cut(hi int) {
	if hi > p.mark {
		p.segs = append(p.segs, segment{lo: p.mark, hi: hi})
		p.mark = hi
	}
}

// reset empties p for its next use, freeing the buffers it still owns.
func (p *pieces) reset() {
	for i := range p.bufs {
		if p.bufs[i] != nil {
			p.bufs[i].Free()
			p.bufs[i] = nil
		}
	}
	for ; p.refs > 0; p.refs-- {
		<-p.released
	}
	clear(p.segs)
	clear(p.fields)
	p.bufs, p.segs, p.fields = p.bufs[:0], p.segs[:0], p.fields[:0]
	p.scratch, p.mark, p.nref, p.size = p.scratch[:0], 0, 0, 0
}

// takeFirst hands the first piece, the one with the prefix, to the caller,
// who sends it its own way (with the response headers) before send.
func (p *pieces) takeFirst() *bufpool.Buffer {
	b := p.bufs[0]
	p.bufs[0] = nil
	return b
}

// itemSender is what pieces are sent through: an h2conn.Stream, or a
// ServerStream as streamSender (through its Transport when it has one).
type itemSender interface{ Send(h2conn.SendItem) error }

// streamSender is a ServerStream as an itemSender.
type streamSender ServerStream

func (s *streamSender) Send(it h2conn.SendItem) error { return (*ServerStream)(s).send(it) }

// send writes the pieces the caller did not take to st as DATA, ending the
// stream with the last when end, waits until the engine has let go of every
// wrapped piece, and gives p back to its pool: p must not be used after.
// The first write error ends the writes; the pieces not written are freed.
func (p *pieces) send(st itemSender, end bool) error {
	var err error
	for i, b := range p.bufs {
		if b == nil {
			continue
		}
		p.bufs[i] = nil
		if err != nil {
			b.Free()
			continue
		}
		err = st.Send(h2conn.DataItem(b, end && i == len(p.bufs)-1)) // takes ownership of b
	}
	p.drop()
	return err
}

// drop frees the pieces not sent, waits until every wrapped one has been
// let go, and gives p back to its pool: p must not be used after.
func (p *pieces) drop() {
	p.reset()
	piecesPool.Put(p)
}

// direct says whether appendScalar writes fd's value v as proto.Marshal
// does: singular scalars, and strings that are valid UTF-8 (proto.Marshal
// refuses others where the syntax demands it, so those go through a run).
// Writing them directly spares a run the allocations protoreflect's Set
// makes for strings.
func direct(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return false
	case protoreflect.StringKind:
		return utf8.ValidString(v.String())
	}
	return true
}

// appendScalar appends singular field fd with value v in the wire format.
func appendScalar(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	n := fd.Number()
	switch fd.Kind() {
	case protoreflect.BoolKind:
		b = protowire.AppendTag(b, n, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeBool(v.Bool()))
	case protoreflect.EnumKind:
		b = protowire.AppendTag(b, n, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(int64(v.Enum())))
	case protoreflect.Int32Kind, protoreflect.Int64Kind:
		b = protowire.AppendTag(b, n, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(v.Int()))
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		b = protowire.AppendTag(b, n, protowire.VarintType)
		return protowire.AppendVarint(b, v.Uint())
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		b = protowire.AppendTag(b, n, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeZigZag(v.Int()))
	case protoreflect.Fixed32Kind:
		b = protowire.AppendTag(b, n, protowire.Fixed32Type)
		return protowire.AppendFixed32(b, uint32(v.Uint()))
	case protoreflect.Sfixed32Kind:
		b = protowire.AppendTag(b, n, protowire.Fixed32Type)
		return protowire.AppendFixed32(b, uint32(v.Int()))
	case protoreflect.FloatKind:
		b = protowire.AppendTag(b, n, protowire.Fixed32Type)
		return protowire.AppendFixed32(b, math.Float32bits(float32(v.Float())))
	case protoreflect.Fixed64Kind:
		b = protowire.AppendTag(b, n, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, v.Uint())
	case protoreflect.Sfixed64Kind:
		b = protowire.AppendTag(b, n, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, uint64(v.Int()))
	case protoreflect.DoubleKind:
		b = protowire.AppendTag(b, n, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, math.Float64bits(v.Float()))
	case protoreflect.StringKind:
		b = protowire.AppendTag(b, n, protowire.BytesType)
		return protowire.AppendString(b, v.String())
	}
	// BytesKind: a field below referenceMin, copied.
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendBytes(b, v.Bytes())
}
