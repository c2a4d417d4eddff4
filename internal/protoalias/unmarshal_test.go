package protoalias_test

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leangrpc/leangrpc/internal/protoalias/testmsg"
)

// FuzzUnmarshal decodes arbitrary bytes into a message type chosen by
// typeSel, with a minField chosen by minSel (see minFieldAt), and checks
// protoalias.Unmarshal against proto.Unmarshal with checkDecode.
func FuzzUnmarshal(f *testing.F) {
	addWireSeeds(f)
	f.Fuzz(func(t *testing.T, typeSel, minSel byte, wire []byte) {
		checkDecode(t, typeAt(typeSel), minFieldAt(minSel), wire)
	})
}

// FuzzGeneratedMessages builds a message from a plan (see generator),
// marshals it, and checks the decoding of that, so that the fuzzer
// explores valid structure: deep nestings, every field kind, large values
// at every place. The plan's first byte may also merge a second message
// after the first, append one of another type (unknown fields), or cut
// the encoding short.
func FuzzGeneratedMessages(f *testing.F) {
	rng := rand.New(rand.NewPCG(0x9e4e, 2))
	for i := range 4 * len(messageTypes) {
		f.Add(byte(i), byte(rng.Uint32()), randomPlan(rng))
	}
	f.Fuzz(func(t *testing.T, typeSel, minSel byte, plan []byte) {
		mt := typeAt(typeSel)
		g := newGenerator(plan)
		shape := g.byte()
		wire, ok := g.wire(mt)
		if !ok {
			return
		}
		switch shape % 4 {
		case 1:
			if second, ok := g.wire(mt); ok {
				wire = append(wire, second...)
			}
		case 2:
			if other, ok := g.wire(typeAt(g.byte())); ok {
				wire = append(wire, other...)
			}
		case 3:
			if len(wire) > 0 {
				wire = wire[:g.number()%uint64(len(wire))]
			}
		}
		checkDecode(t, mt, minFieldAt(minSel), wire)
	})
}

// wire populates a new message of type mt from g's plan and marshals it.
// It reports false when the message cannot be marshaled, which happens
// when the plan put invalid UTF-8 into a string field that validates.
func (g *generator) wire(mt messageType) ([]byte, bool) {
	m := mt.new()
	g.populate(m.ProtoReflect(), 0)
	b, err := proto.MarshalOptions{AllowPartial: true, Deterministic: true}.Marshal(m)
	return b, err == nil
}

func randomPlan(rng *rand.Rand) []byte {
	b := make([]byte, 32+rng.IntN(320))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// addWireSeeds seeds FuzzUnmarshal with encodings of generated messages
// of every type, some holding values of kilobytes at several depths, and
// with the inputs that trip a decoder built from runs: two messages
// merged, one type decoded as another (unknown fields), truncated and
// corrupted encodings, and the hand-built orderings of the unit tests.
func addWireSeeds(f *testing.F) {
	rng := rand.New(rand.NewPCG(0x5eed, 1))
	for ti, mt := range messageTypes {
		typeSel := byte(ti)
		for range 4 {
			wire, ok := newGenerator(randomPlan(rng)).wire(mt)
			if !ok {
				continue
			}
			minSel := byte(rng.Uint32())
			f.Add(typeSel, minSel, wire)
			if second, ok := newGenerator(randomPlan(rng)).wire(mt); ok {
				f.Add(typeSel, minSel, concat(wire, second))
			}
			other := messageTypes[rng.IntN(len(messageTypes))]
			if foreign, ok := newGenerator(randomPlan(rng)).wire(other); ok {
				f.Add(typeSel, minSel, foreign)
			}
			if len(wire) > 1 {
				f.Add(typeSel, minSel, wire[:rng.IntN(len(wire))])
				corrupt := concat(wire)
				corrupt[rng.IntN(len(corrupt))] ^= byte(1 + rng.IntN(255))
				f.Add(typeSel, minSel, corrupt)
			}
		}
	}
	// Messages whose every bytes value takes kilobytes, at each depth
	// the plan reaches.
	for ti, mt := range messageTypes {
		g := newGenerator(randomPlan(rng))
		g.large = true
		if wire, ok := g.wire(mt); ok {
			f.Add(byte(ti), byte(rng.Uint32()), wire)
		}
	}
	for _, s := range handSeeds() {
		f.Add(s.typeSel, s.minSel, s.wire)
	}
}

type seed struct {
	typeSel, minSel byte
	wire            []byte
}

// handSeeds are orderings a marshaler does not write, one per rule the
// unit tests pin down.
func handSeeds() []seed {
	indexOf := func(m proto.Message) byte {
		name := generatedType(m).name
		for i, mt := range messageTypes {
			if mt.name == name {
				return byte(i)
			}
		}
		panic("no message type " + name)
	}
	legacy, chunk, strict := indexOf(&testmsg.Legacy{}), indexOf(&testmsg.Chunk{}), indexOf(&testmsg.Strict{})
	const minSel = 31 // minField 32
	big, small := filled(100, 1), filled(5, 2)
	return []seed{
		// oneof: a large bytes member, then a small string member, and back.
		{legacy, minSel, concat(lenField(40, big), lenField(41, small), lenField(40, big))},
		// repeated bytes, large and small interleaved.
		{legacy, minSel, concat(lenField(28, small), lenField(28, big), lenField(28, small), lenField(28, big))},
		// a message field twice, large then small.
		{legacy, minSel, concat(lenField(30, lenField(15, big)), lenField(30, varintField(1, 7)))},
		// a singular bytes field twice, large then small.
		{legacy, minSel, concat(lenField(15, big), lenField(15, small))},
		// required fields split across two occurrences of a message field.
		{legacy, minSel, concat(lenField(32, lenField(2, big)), lenField(32, varintField(1, 1)))},
		// a required field missing.
		{strict, minSel, lenField(2, big)},
		// a nesting with a large value at the bottom.
		{chunk, minSel, chunkChain(40, big)},
	}
}
