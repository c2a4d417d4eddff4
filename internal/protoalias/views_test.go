package protoalias_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/leangrpc/leangrpc/internal/protoalias/testmsg"
)

// view is a bytes value of a decoded message that points into the input.
type view struct {
	path *path
	b    []byte
}

// path names a value inside a message, for failure messages. It is a
// linked list formatted only when reported, because the recursion tests
// walk messages 10,000 levels deep.
type path struct {
	parent *path
	name   string // a field name, or "" for an element
	key    any    // an element's list index or map key
}

func (p *path) field(name string) *path { return &path{parent: p, name: name} }
func (p *path) elem(key any) *path      { return &path{parent: p, key: key} }

func (p *path) String() string {
	var parts []string
	for ; p != nil; p = p.parent {
		if p.name != "" {
			parts = append(parts, "."+p.name)
		} else {
			parts = append(parts, fmt.Sprintf("[%v]", p.key))
		}
	}
	slices.Reverse(parts)
	return strings.Join(parts, "")
}

// throughExtension reports whether p goes through an extension, whose
// values goWalk skips.
func (p *path) throughExtension() bool {
	for ; p != nil; p = p.parent {
		if strings.HasPrefix(p.name, "(") {
			return true
		}
	}
	return false
}

// within reports whether p, the start of a value of n bytes, lies inside
// in, and whether the whole value does.
func within(p unsafe.Pointer, n int, in []byte) (starts, fits bool) {
	if len(in) == 0 || p == nil {
		return false, false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(in)))
	hi := lo + uintptr(len(in))
	at := uintptr(p)
	if at < lo || at >= hi {
		return false, false
	}
	return true, at+uintptr(n) <= hi
}

// reflectWalk calls onBytes for every bytes value of m and onString for
// every string, as protoreflect presents them: every populated field,
// list element, map value, oneof member and extension, nested messages
// and groups included, and m's unknown fields (as bytes at a path ending
// in ".?"). protoreflect hands bytes out with their capacity cut to
// their length, so these tell where a value points, not its capacity:
// goWalk finds the slices themselves.
func reflectWalk(m protoreflect.Message, at *path, onBytes func(*path, []byte), onString func(*path, string)) {
	if u := m.GetUnknown(); len(u) > 0 {
		onBytes(at.field("?"), u)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := at.field(string(fd.Name()))
		if fd.IsExtension() {
			p = at.field("(" + string(fd.FullName()) + ")")
		}
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				kp := p.elem(k.Interface())
				if fd.MapKey().Kind() == protoreflect.StringKind {
					onString(kp.field("key"), k.String())
				}
				reflectValue(fd.MapValue(), mv, kp, onBytes, onString)
				return true
			})
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				reflectValue(fd, l.Get(i), p.elem(i), onBytes, onString)
			}
		default:
			reflectValue(fd, v, p, onBytes, onString)
		}
		return true
	})
}

func reflectValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, at *path, onBytes func(*path, []byte), onString func(*path, string)) {
	switch fd.Kind() {
	case protoreflect.BytesKind:
		onBytes(at, v.Bytes())
	case protoreflect.StringKind:
		onString(at, v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		reflectWalk(v.Message(), at, onBytes, onString)
	}
}

// goSkipped names the fields of generated structs that goWalk does not
// enter: protobuf-go's per-message state (type information, size cache,
// race-detector hooks, presence bits) holds no decoded bytes, and
// extension values are protoreflect.Values, which keep no capacity.
var goSkipped = map[string]bool{
	"state":                  true,
	"sizeCache":              true,
	"extensionFields":        true,
	"XXX_raceDetectHookData": true,
	"XXX_presence":           true,
}

// goWalk calls onBytes for every []byte held in the Go value v of a
// generated message, with the length and capacity it has there: exported
// fields, the opaque API's hidden fields, oneof wrappers, map values,
// unknown fields and lazily decoded buffers, through pointers and
// interfaces. reflect lets it read unexported fields this way (Bytes,
// Len, Elem), as long as it never asks for them as interfaces.
func goWalk(v reflect.Value, at *path, onBytes func(*path, []byte)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			goWalk(v.Elem(), at, onBytes)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if goSkipped[f.Name] {
				continue
			}
			goWalk(v.Field(i), at.field(f.Name), onBytes)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			onBytes(at, v.Bytes())
			return
		}
		for i := range v.Len() {
			goWalk(v.Index(i), at.elem(i), onBytes)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			goWalk(it.Value(), at.elem(it.Key()), onBytes)
		}
	}
}

// viewsOf returns the views into in that m holds, as goWalk finds them
// (with their capacities) for a generated message and as reflectWalk
// finds them for a dynamic one. It also returns the problems that need
// no capacity to see: a string that shares in's memory (protoalias only
// aliases bytes fields), a value that starts in in but runs past its end,
// and, for generated messages, a view that protoreflect shows but goWalk
// missed, which would mean goWalk leaves some field unchecked.
func viewsOf(m proto.Message, in []byte, dynamic bool) (views []view, problems []string) {
	reflectViews := map[unsafe.Pointer]*path{}
	reflectWalk(m.ProtoReflect(), nil, func(at *path, b []byte) {
		p := unsafe.Pointer(unsafe.SliceData(b))
		starts, fits := within(p, len(b), in)
		if !starts {
			return
		}
		if !fits {
			problems = append(problems, fmt.Sprintf("%v: %d bytes starting in the input run past its end", at, len(b)))
		}
		reflectViews[p] = at
		if dynamic {
			views = append(views, view{at, b})
		}
	}, func(at *path, s string) {
		if starts, _ := within(unsafe.Pointer(unsafe.StringData(s)), len(s), in); starts {
			problems = append(problems, fmt.Sprintf("%v: string of %d bytes shares the input's memory", at, len(s)))
		}
	})
	if dynamic {
		return views, problems
	}
	seen := map[unsafe.Pointer]bool{}
	goWalk(reflect.ValueOf(m), nil, func(at *path, b []byte) {
		p := unsafe.Pointer(unsafe.SliceData(b))
		if starts, _ := within(p, len(b), in); starts {
			views = append(views, view{at, b})
			seen[p] = true
		}
	})
	for p, at := range reflectViews {
		if !seen[p] && !at.throughExtension() {
			problems = append(problems, fmt.Sprintf("%v: a view protoreflect shows that goWalk did not find", at))
		}
	}
	return views, problems
}

// TestViewsOfFindsEveryPlace checks the checker: a message built by hand
// with a slice of one buffer in each place a bytes value can be held
// must show viewsOf every one of them, with the capacity it was given,
// or checkDecode's capacity rule would pass without looking.
func TestViewsOfFindsEveryPlace(t *testing.T) {
	buf := make([]byte, 256)
	next := 0
	piece := func() []byte { // 8 bytes, with capacity to the end of buf
		next += 8
		return buf[next-8 : next]
	}
	legacy := &testmsg.Legacy{
		FBytes:       piece(),
		RBytes:       [][]byte{piece(), piece()},
		Choice:       &testmsg.Legacy_CBytes{CBytes: piece()},
		Child:        &testmsg.Legacy{Children: []*testmsg.Legacy{{FBytes: piece()}}},
		Item:         &testmsg.Legacy_Item{Data: piece()},
		MStringBytes: map[string][]byte{"k": piece()},
		MInt32Legacy: map[int32]*testmsg.Legacy{1: {FBytes: piece()}},
	}
	legacy.ProtoReflect().SetUnknown(piece())
	proto.SetExtension(legacy, testmsg.E_ExtBytes, piece())
	sealed := testmsg.Sealed_builder{
		FBytes:    piece(),
		IBytes:    piece(),
		RBytes:    [][]byte{piece()},
		LazyChild: testmsg.Sealed_builder{FBytes: piece()}.Build(),
		CBytes:    piece(),
	}.Build()

	for _, c := range []struct {
		m          proto.Message
		want       int // views goWalk finds
		extensions int // views only protoreflect shows
	}{
		{legacy, 9, 1},
		{sealed, 5, 0},
	} {
		views, problems := viewsOf(c.m, buf, false)
		for _, p := range problems {
			t.Error(p)
		}
		if len(views) != c.want {
			t.Errorf("%T: %d views, want %d", c.m, len(views), c.want)
		}
		for _, v := range views {
			if cap(v.b) == len(v.b) {
				t.Errorf("%T: %v has capacity %d for length %d: goWalk lost the capacity", c.m, v.path, cap(v.b), len(v.b))
			}
		}
		dynamicViews, _ := viewsOf(c.m, buf, true)
		if len(dynamicViews) != c.want+c.extensions {
			t.Errorf("%T: protoreflect shows %d views, want %d", c.m, len(dynamicViews), c.want+c.extensions)
		}
	}
}
