// Package protoalias decodes protobuf messages as proto.Unmarshal does,
// except that large bytes fields point into the input instead of holding
// copies of it. protobuf-go copies every bytes field it decodes; for a
// message that carries a megabyte in one field that copy is most of the
// cost of receiving it. The caller must guarantee that the input is never
// written again: the decoded message shares its memory.
//
// The decoder is built on protobuf-go's public APIs only. Protobuf's wire
// format is a concatenation: decoding a buffer is the same as decoding its
// fields' runs one after another, each merged into the message. So the
// decoder walks a message's top-level fields, hands every run of ordinary
// fields to proto.UnmarshalOptions with Merge, and handles only two kinds
// of field itself: a large bytes field, which it sets to a view of the
// input, and a large message field, into which it descends. What protobuf-go
// would do with each run is then exactly what it does, including unknown
// fields, extensions, maps, groups, oneofs and its validation.
package protoalias

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// DefaultMinField is the length from which Unmarshal aliases a bytes
// field, when the caller gives none. Below it a copy costs less than the
// field's share of walking the message by reflection, and a small field
// that aliased would keep its whole message's buffer alive for as long as
// the application holds the field.
const DefaultMinField = 16 << 10

// recursionLimit is proto.Unmarshal's default nesting limit, which the
// descent into large message fields counts against as protobuf-go would:
// a run at depth d is decoded with the limit less d.
const recursionLimit = protowire.DefaultRecursionLimit

var errRecursionDepth = errors.New("proto: exceeded maximum recursion depth")

// Unmarshal decodes b into m as proto.Unmarshal does (m is reset first),
// except that bytes fields of at least minField bytes (DefaultMinField
// when minField <= 0) alias b, with their capacity cut to their length, so
// that an append to one never writes into b. When any field does,
// aliased is true, and b must stay unwritten for as long as m (or the
// field) is referenced; it may also be true when a later occurrence of
// the field replaced every view (a oneof's next member, a singular field
// set again). Results and errors are proto.Unmarshal's, and an input it
// fails on leaves no view in m.
func Unmarshal(b []byte, m proto.Message, minField int) (aliased bool, err error) {
	if minField <= 0 {
		minField = DefaultMinField
	}
	proto.Reset(m)
	if len(b) < minField {
		return false, proto.Unmarshal(b, m)
	}
	d := decoder{min: minField}
	err = d.merge(b, m.ProtoReflect(), 0)
	if err == nil {
		// The runs were decoded allowing missing required fields,
		// which a later run may supply: the whole message is checked
		// once.
		err = proto.CheckInitialized(m)
	}
	if err != nil {
		// proto.Unmarshal decides what a bad input gives: its verdict
		// on required fields inside oneof members differs from
		// CheckInitialized's (protobuf-go v1.36), and on any error m
		// must hold no view of b, since the caller will not keep b.
		return false, proto.Unmarshal(b, m)
	}
	return d.aliased, nil
}

type decoder struct {
	min     int
	aliased bool
}

// merge decodes b into m, as proto.UnmarshalOptions{Merge: true} would at
// nesting depth depth.
func (d *decoder) merge(b []byte, m protoreflect.Message, depth int) error {
	fields := m.Descriptor().Fields()
	run := 0 // start of the run of ordinary fields not yet decoded
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 || typ != protowire.BytesType {
			if n < 0 {
				break // malformed: the run's decoder reports it
			}
			k := protowire.ConsumeFieldValue(num, typ, b[i+n:])
			if k < 0 {
				break
			}
			i += n + k
			continue
		}
		v, k := protowire.ConsumeBytes(b[i+n:])
		if k < 0 {
			break
		}
		end := i + n + k
		if len(v) < d.min {
			i = end
			continue
		}
		fd := fields.ByNumber(num)
		if fd == nil || !d.special(fd) {
			i = end
			continue
		}
		if err := d.runs(b[run:i], m, depth); err != nil {
			return err
		}
		off := end - len(v)
		if err := d.field(fd, b[off:end:end], m, depth); err != nil {
			return err
		}
		i, run = end, end
	}
	// The rest, including any malformed tail, which proto reports.
	return d.runs(b[run:], m, depth)
}

// special reports whether fd is a field the decoder handles itself when
// its value is large: a bytes field, or a message field encoded with a
// length (a group-encoded one, delimited in editions, is left to proto).
// Map entries are messages, but their fields are set as a whole by proto.
func (d *decoder) special(fd protoreflect.FieldDescriptor) bool {
	switch fd.Kind() {
	case protoreflect.BytesKind:
		return true
	case protoreflect.MessageKind:
		return !fd.IsMap() && !fd.IsWeak()
	}
	return false
}

// field decodes one large value v of fd into m.
func (d *decoder) field(fd protoreflect.FieldDescriptor, v []byte, m protoreflect.Message, depth int) error {
	if fd.Kind() == protoreflect.BytesKind {
		d.aliased = true
		if fd.IsList() {
			m.Mutable(fd).List().Append(protoreflect.ValueOfBytes(v))
		} else {
			m.Set(fd, protoreflect.ValueOfBytes(v))
		}
		return nil
	}
	if depth+1 >= recursionLimit {
		return errRecursionDepth // where proto.Unmarshal fails too
	}
	var sub protoreflect.Message
	if fd.IsList() {
		sub = m.Mutable(fd).List().AppendMutable().Message()
	} else {
		sub = m.Mutable(fd).Message()
	}
	return d.merge(v, sub, depth+1)
}

// runs merges a run of ordinary fields into m with protobuf-go itself.
func (d *decoder) runs(b []byte, m protoreflect.Message, depth int) error {
	if len(b) == 0 {
		return nil
	}
	o := proto.UnmarshalOptions{Merge: true, AllowPartial: true, RecursionLimit: recursionLimit - depth}
	return o.Unmarshal(b, m.Interface())
}
