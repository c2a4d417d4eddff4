package protoalias_test

import (
	"math"
	"slices"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// generator populates messages by protoreflect from a plan: a byte string
// read one decision at a time. Every decision reads as zero past the
// plan's end, and zero means "leave it unset", so a plan of any length
// makes a finite message, and the fuzzer, mutating plans, explores valid
// message structure instead of only mutated wire bytes.
type generator struct {
	plan   []byte
	budget int  // bytes that bytes and string values may still take
	large  bool // whether every bytes value that is not empty takes kilobytes
}

// maxGeneratedDepth bounds the nesting of generated messages: deep
// nestings are built by hand in the recursion tests.
const maxGeneratedDepth = 5

// generatedBudget bounds the bytes of one generated message's values, so
// that a fuzz iteration stays fast. It holds several of the largest
// values blob makes.
const generatedBudget = 24 << 10

func newGenerator(plan []byte) *generator {
	return &generator{plan: plan, budget: generatedBudget}
}

func (g *generator) byte() byte {
	if len(g.plan) == 0 {
		return 0
	}
	b := g.plan[0]
	g.plan = g.plan[1:]
	return b
}

// count chooses how many elements a list or map gets.
func (g *generator) count() int { return int(g.byte() % 4) }

// number reads an integer of 0 to 8 bytes, negated when the selector's
// top bit is set, so that small, large and negative values (the ten-byte
// varints) are all common.
func (g *generator) number() uint64 {
	sel := g.byte()
	var v uint64
	for i := range int(sel % 9) {
		v |= uint64(g.byte()) << (8 * i)
	}
	if sel&0x80 != 0 {
		v = -v
	}
	return v
}

// blob makes a bytes value whose length is drawn from classes around the
// fuzz targets' minField (1 to 64) and above it, now and then up to
// 8 KiB: a value of kilobytes makes each run of a fuzz target, and each
// step of minimizing an input, that much slower.
func (g *generator) blob() []byte {
	sel := g.byte()
	var n int
	class := sel % 8
	if g.large && class != 0 {
		class = 7
	}
	switch class {
	case 0:
		n = 0
	case 1, 2, 3:
		n = 1 + int(g.byte()%16)
	case 4, 5:
		n = 17 + int(g.byte()%64)
	case 6:
		n = 81 + 2*int(g.byte())
	case 7:
		if sel&0x80 == 0 && !g.large {
			n = 600 + 6*int(g.byte())
		} else {
			n = 2<<10 + 24*int(g.byte())
		}
	}
	n = min(n, g.budget)
	g.budget -= n
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) + sel
	}
	return b
}

// text makes a short string, now and then not valid UTF-8: marshaling
// then fails for a field that validates, and the generated case is
// skipped, but a proto2 string or an edition one with utf8_validation
// NONE carries it to the decoders.
func (g *generator) text() string {
	sel := g.byte()
	n := min(int(sel%24), g.budget)
	g.budget -= n
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i+int(sel))%26
	}
	if sel >= 0xF8 && n > 0 {
		b[n-1] = 0xFF
	}
	return string(b)
}

func (g *generator) scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(g.byte()&1 == 1)
	case protoreflect.EnumKind:
		sel := g.byte()
		values := fd.Enum().Values()
		if sel >= 0xF0 {
			// An undeclared number: a closed enum's decoder moves it to the
			// unknown fields.
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(sel))
		}
		return protoreflect.ValueOfEnum(values.Get(int(sel) % values.Len()).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(g.number()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(g.number()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(g.number()))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(g.number())
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(math.Float32frombits(uint32(g.number())))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(math.Float64frombits(g.number()))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(g.text())
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(g.blob())
	}
	panic("generator: no scalar of kind " + fd.Kind().String())
}

// populate sets a random selection of m's fields and extensions. A
// required field is set unless the plan says otherwise now and then, so
// that both decoders must also agree on messages that miss one.
func (g *generator) populate(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		sel := g.byte()
		if fd.Cardinality() == protoreflect.Required {
			if sel%16 == 15 {
				continue
			}
		} else if sel%4 != 1 {
			continue
		}
		g.set(m, fd, depth)
	}
	for _, xt := range extensionsOf(m.Descriptor()) {
		if g.byte()%4 == 1 {
			g.set(m, xt.TypeDescriptor(), depth)
		}
	}
}

func (g *generator) set(m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int) {
	isMessage := func(fd protoreflect.FieldDescriptor) bool { return fd.Message() != nil }
	if isMessage(fd) && !fd.IsMap() && depth >= maxGeneratedDepth {
		return
	}
	switch {
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		for range g.count() {
			k := g.scalar(fd.MapKey()).MapKey()
			if !isMessage(fd.MapValue()) {
				mp.Set(k, g.scalar(fd.MapValue()))
				continue
			}
			v := mp.NewValue()
			if depth < maxGeneratedDepth {
				g.populate(v.Message(), depth+1)
			}
			mp.Set(k, v)
		}
	case fd.IsList():
		l := m.Mutable(fd).List()
		for range g.count() {
			if !isMessage(fd) {
				l.Append(g.scalar(fd))
				continue
			}
			v := l.NewElement()
			g.populate(v.Message(), depth+1)
			l.Append(v)
		}
	case isMessage(fd):
		v := m.NewField(fd)
		g.populate(v.Message(), depth+1)
		m.Set(fd, v)
	default:
		m.Set(fd, g.scalar(fd))
	}
}

// extensionsOf lists the registered extensions of md in field-number
// order, so that a plan populates the same ones every time.
func extensionsOf(md protoreflect.MessageDescriptor) []protoreflect.ExtensionType {
	if md.ExtensionRanges().Len() == 0 {
		return nil
	}
	var xts []protoreflect.ExtensionType
	protoregistry.GlobalTypes.RangeExtensionsByMessage(md.FullName(), func(xt protoreflect.ExtensionType) bool {
		xts = append(xts, xt)
		return true
	})
	slices.SortFunc(xts, func(a, b protoreflect.ExtensionType) int {
		return int(a.TypeDescriptor().Number()) - int(b.TypeDescriptor().Number())
	})
	return xts
}
