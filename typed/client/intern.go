package client

import (
	"hash/maphash"
	goreflect "reflect"
	"sync"
	"sync/atomic"
	"unique"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/event"
)

// MaxInternedLen is the longest string InternStrings interns: longer ones (a
// last-applied-configuration annotation, a certificate) are rarely shared.
const MaxInternedLen = 128

// InternStrings is a transform for controller.Options.Transform that makes the strings of
// obj that many cached objects repeat (label keys and values, annotation keys, the
// namespace, owner references, apiVersion and kind, and in the rest of the object
// image names, container and port names, enumerations such as "IfNotPresent") share one
// copy, through Go's unique package, instead of one copy per decoded object. A string
// that no cached object holds any more is freed, as any other.
//
// It leaves out the fields that are unique to an object (name, generateName, uid,
// resourceVersion, selfLink) and strings longer than MaxInternedLen. It sets only exported
// fields, so types with unexported state (resource.Quantity, metav1.Time) keep theirs.
// It reaches strings through structs, pointers, slices and maps keyed by strings, not
// through interfaces (an unstructured object's map[string]interface{} is left as it is)
// or maps with other keys. The handles of
// the 16,384 strings interned last (by slot, see recent) are kept, so that a string stays
// shared across garbage collections; they hold at most that many strings of up to
// MaxInternedLen bytes alive.
func InternStrings[T event.Object](obj T) (T, error) {
	v := goreflect.ValueOf(obj)
	if v.Kind() == goreflect.Pointer && !v.IsNil() {
		if w := walkerOf(v.Type().Elem()); w != nil {
			w.walk(v.UnsafePointer())
		}
	}
	return obj, nil
}

// A walker interns the strings of one type's values in place, given a value's address.
// A type's walker is planned once, from its reflect.Type, so that interning an object
// costs one look-up and then only the walk through the fields that can hold strings: no
// reflect.Value per field, no type switch per value.
type walker struct {
	walk func(p unsafe.Pointer)
}

var (
	objectMetaType = goreflect.TypeFor[metav1.ObjectMeta]()
	// quantityType holds its strings unexported, and its format is a constant.
	quantityType  = goreflect.TypeFor[resource.Quantity]()
	stringMapType = goreflect.TypeFor[map[string]string]()
	walkers       sync.Map   // goreflect.Type → *walker, nil for a type with nothing to intern
	planning      sync.Mutex // serialises planning, so that a type is planned once
)

// walkerOf returns t's walker, planning it the first time, or nil when a value of t
// holds no string InternStrings sets.
func walkerOf(t goreflect.Type) *walker {
	if w, ok := walkers.Load(t); ok {
		return w.(*walker)
	}
	planning.Lock()
	defer planning.Unlock()
	p := planner{walkers: map[goreflect.Type]*walker{}, holds: map[goreflect.Type]bool{}}
	w := p.plan(t)
	// Published only now: a walker of a recursive type is complete once the whole plan is.
	for t, w := range p.walkers {
		walkers.LoadOrStore(t, w)
	}
	return w
}

// planner plans the walkers of a type and of the types it reaches.
type planner struct {
	walkers map[goreflect.Type]*walker
	holds   map[goreflect.Type]bool
}

// plan returns t's walker, nil when t holds no string InternStrings sets. A walker
// that reaches its own type (a recursive type) calls the walker being planned, whose
// walk is set before the plan is published.
func (p *planner) plan(t goreflect.Type) *walker {
	if w, ok := walkers.Load(t); ok {
		return w.(*walker)
	}
	if w, ok := p.walkers[t]; ok {
		return w
	}
	if !p.holdsStrings(t, map[goreflect.Type]bool{}) {
		p.walkers[t] = nil
		return nil
	}
	w := &walker{}
	p.walkers[t] = w
	switch t.Kind() {
	case goreflect.String:
		w.walk = func(ptr unsafe.Pointer) {
			s := (*string)(ptr)
			*s = intern(*s)
		}
	case goreflect.Pointer:
		elem := p.plan(t.Elem())
		w.walk = func(ptr unsafe.Pointer) {
			if q := *(*unsafe.Pointer)(ptr); q != nil {
				elem.walk(q)
			}
		}
	case goreflect.Slice:
		elem, size := p.plan(t.Elem()), t.Elem().Size()
		w.walk = func(ptr unsafe.Pointer) {
			s := (*sliceHeader)(ptr)
			for i := range s.len {
				elem.walk(unsafe.Add(s.data, uintptr(i)*size))
			}
		}
	case goreflect.Map:
		if t == stringMapType {
			w.walk = func(ptr unsafe.Pointer) { internStringMap(*(*map[string]string)(ptr)) }
			break
		}
		elem := p.plan(t.Elem())
		w.walk = func(ptr unsafe.Pointer) { internMap(goreflect.NewAt(t, ptr).Elem(), elem) }
	case goreflect.Struct:
		if t == objectMetaType {
			w.walk = func(ptr unsafe.Pointer) { internMeta((*metav1.ObjectMeta)(ptr)) }
			break
		}
		type field struct {
			offset uintptr
			w      *walker
		}
		var fields []field
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				if fw := p.plan(f.Type); fw != nil {
					fields = append(fields, field{f.Offset, fw})
				}
			}
		}
		w.walk = func(ptr unsafe.Pointer) {
			for _, f := range fields {
				f.w.walk(unsafe.Add(ptr, f.offset))
			}
		}
	}
	return w
}

// sliceHeader is the runtime's layout of a slice value.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// holdsStrings reports whether a value of t can hold a string InternStrings sets.
func (p *planner) holdsStrings(t goreflect.Type, seen map[goreflect.Type]bool) bool {
	if h, ok := p.holds[t]; ok {
		return h
	}
	if seen[t] {
		return true // a recursive type: its other fields decide, and true only costs a walk
	}
	seen[t] = true
	holds := false
	switch t.Kind() {
	case goreflect.String:
		holds = true
	case goreflect.Pointer:
		holds = p.holdsStrings(t.Elem(), seen)
	case goreflect.Slice:
		holds = t.Elem().Kind() != goreflect.Uint8 && p.holdsStrings(t.Elem(), seen)
	case goreflect.Map:
		// Only maps keyed by strings: storing an entry back under a key that is not
		// equal to itself (a NaN) would add one.
		holds = t.Key().Kind() == goreflect.String
	case goreflect.Struct:
		if t == quantityType {
			break
		}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && p.holdsStrings(f.Type, seen) {
				holds = true
				break
			}
		}
	}
	p.holds[t] = holds
	return holds
}

// recent holds the handles of the strings interned lately, one per slot, the slot
// chosen by the string's hash. unique keeps a canonical copy only while a handle to it
// is reachable, not while strings taken from it are: without these handles each garbage
// collection would make it forget every canonical copy, and the objects decoded after
// it would get copies of their own. A string whose slot another took keeps its
// canonical copy until the next collection. The handles also make a repeated string's
// interning a hash and a comparison. At most len(recent) strings are kept alive this way.
var (
	recent     [1 << 14]atomic.Pointer[unique.Handle[string]]
	recentSeed = maphash.MakeSeed()
)

func intern(s string) string {
	if s == "" || len(s) > MaxInternedLen {
		return s
	}
	slot := &recent[maphash.String(recentSeed, s)%uint64(len(recent))]
	if h := slot.Load(); h != nil {
		if v := h.Value(); v == s {
			return v
		}
	}
	h := unique.Make(s)
	slot.Store(&h)
	return h.Value()
}

// internMap interns the string keys of a map keyed by strings (assigning an equal key
// replaces the stored one) and, through elem (nil when they hold none), its values'
// strings; values are copies, so their interned copies are stored back.
func internMap(m goreflect.Value, elem *walker) {
	if m.IsNil() {
		return
	}
	// k and v are reused for every entry: SetMapIndex stores copies.
	k, v := goreflect.New(m.Type().Key()).Elem(), goreflect.New(m.Type().Elem()).Elem()
	for iter := m.MapRange(); iter.Next(); {
		k.SetIterKey(iter)
		k.SetString(intern(k.String()))
		v.SetIterValue(iter)
		if elem != nil {
			elem.walk(v.Addr().UnsafePointer())
		}
		m.SetMapIndex(k, v)
	}
}

// internMeta interns what objects share in their metadata, leaving what identifies one.
func internMeta(m *metav1.ObjectMeta) {
	m.Namespace = intern(m.Namespace)
	m.Labels = internStringMap(m.Labels)
	m.Annotations = internStringMap(m.Annotations)
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind, r.Name, r.UID = intern(r.APIVersion), intern(r.Kind), intern(r.Name), types.UID(intern(string(r.UID)))
	}
	for i, f := range m.Finalizers {
		m.Finalizers[i] = intern(f)
	}
	for i := range m.ManagedFields {
		f := &m.ManagedFields[i]
		f.Manager, f.APIVersion, f.FieldsType, f.Subresource = intern(f.Manager), intern(f.APIVersion), intern(f.FieldsType), intern(f.Subresource)
		f.Operation = metav1.ManagedFieldsOperationType(intern(string(f.Operation)))
	}
}

func internStringMap(m map[string]string) map[string]string {
	for k, v := range m {
		m[intern(k)] = intern(v)
	}
	return m
}
