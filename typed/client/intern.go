package client

import (
	goreflect "reflect"
	"sync"
	"unique"

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
func InternStrings[T event.Object](obj T) (T, error) {
	if tm, ok := obj.GetObjectKind().(*metav1.TypeMeta); ok && tm != nil {
		tm.APIVersion, tm.Kind = intern(tm.APIVersion), intern(tm.Kind)
	}
	v := goreflect.ValueOf(obj)
	if v.Kind() == goreflect.Pointer && !v.IsNil() {
		internValue(v.Elem())
	}
	return obj, nil
}

var (
	objectMetaType = goreflect.TypeFor[metav1.ObjectMeta]()
	typeMetaType   = goreflect.TypeFor[metav1.TypeMeta]()
	// quantityType holds its strings unexported, and its format is a constant.
	quantityType = goreflect.TypeFor[resource.Quantity]()
	// holding caches holdsStrings's answer per type, so that walking an object skips
	// at once the fields (numbers, times, quantities) where there is nothing to intern.
	holding      sync.Map // goreflect.Type → bool
	structFields sync.Map // goreflect.Type → []int, see fieldsWithStrings
)

// fieldsWithStrings returns the indexes of struct type t's exported fields that can
// hold strings, computed once per type.
func fieldsWithStrings(t goreflect.Type) []int {
	if v, ok := structFields.Load(t); ok {
		return v.([]int)
	}
	var fields []int
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && holdsStrings(f.Type) {
			fields = append(fields, i)
		}
	}
	structFields.Store(t, fields)
	return fields
}

// holdsStrings reports whether a value of t can hold a string InternStrings sets.
func holdsStrings(t goreflect.Type) bool {
	if v, ok := holding.Load(t); ok {
		return v.(bool)
	}
	return holdsStringsSeen(t, map[goreflect.Type]bool{})
}

func holdsStringsSeen(t goreflect.Type, seen map[goreflect.Type]bool) bool {
	if v, ok := holding.Load(t); ok {
		return v.(bool)
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
		holds = holdsStringsSeen(t.Elem(), seen)
	case goreflect.Slice:
		holds = t.Elem().Kind() != goreflect.Uint8 && holdsStringsSeen(t.Elem(), seen)
	case goreflect.Map:
		holds = t.Key().Kind() == goreflect.String || holdsStringsSeen(t.Elem(), seen)
	case goreflect.Struct:
		if t == quantityType {
			break
		}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && holdsStringsSeen(f.Type, seen) {
				holds = true
				break
			}
		}
	}
	holding.Store(t, holds)
	return holds
}

func intern(s string) string {
	if s == "" || len(s) > MaxInternedLen {
		return s
	}
	return unique.Make(s).Value()
}

// internValue interns the strings v holds, v being settable.
func internValue(v goreflect.Value) {
	switch v.Kind() {
	case goreflect.String:
		if v.CanSet() {
			v.SetString(intern(v.String()))
		}
	case goreflect.Pointer:
		if !v.IsNil() {
			internValue(v.Elem())
		}
	case goreflect.Struct:
		switch v.Type() {
		case typeMetaType:
			return // done by InternStrings, the only place it is
		case objectMetaType:
			if v.CanAddr() {
				internMeta(v.Addr().Interface().(*metav1.ObjectMeta))
			}
			return
		}
		for _, i := range fieldsWithStrings(v.Type()) {
			internValue(v.Field(i))
		}
	case goreflect.Slice:
		if !holdsStrings(v.Type()) {
			return
		}
		for i := range v.Len() {
			internValue(v.Index(i))
		}
	case goreflect.Map:
		if m, ok := v.Interface().(map[string]string); ok {
			internStringMap(m)
		} else if holdsStrings(v.Type()) {
			internMap(v)
		}
	}
}

// internMap interns a map's string keys (assigning an equal key replaces the stored one)
// and its string values; values of other kinds are copies, so only their strings'
// interned copies are stored back.
func internMap(m goreflect.Value) {
	if m.IsNil() {
		return
	}
	keyIsString := m.Type().Key().Kind() == goreflect.String
	elem := m.Type().Elem()
	for iter := m.MapRange(); iter.Next(); {
		k, val := iter.Key(), iter.Value()
		if keyIsString {
			k = goreflect.ValueOf(intern(k.String())).Convert(m.Type().Key())
		}
		if elem.Kind() == goreflect.String {
			val = goreflect.ValueOf(intern(val.String())).Convert(elem)
		} else {
			c := goreflect.New(elem).Elem()
			c.Set(val)
			internValue(c)
			val = c
		}
		m.SetMapIndex(k, val)
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
	}
}

func internStringMap(m map[string]string) map[string]string {
	for k, v := range m {
		m[intern(k)] = intern(v)
	}
	return m
}
