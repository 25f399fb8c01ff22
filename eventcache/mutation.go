package eventcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"sort"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/conversion"

	"github.com/typedinformer/typedinformer/event"
)

// errNotJSON is reported, wrapped, the first time the detector of a store meets an object
// that does not encode as JSON.
var errNotJSON = errors.New("does not encode as JSON")

// DetectMutations makes the Writer keep a snapshot of every object it stores and compare
// the object with it when the object is replaced or deleted, and on CheckMutations: a
// difference means someone changed a cached object in place. A ResourceTrackingConsumer
// reports each difference found during its writes as a *MutationError, with the errors of
// the batch it found it in. Call it before the first write and before the Writer is
// shared.
//
// The snapshot is the object's JSON encoding (encoding/json, as the API machinery's
// types marshal), not a DeepCopyObject: a custom resource's hand-written DeepCopyObject
// often copies only the top level, and a copy that shares a map, a slice or a pointer
// with the cached object changes with it, hiding the change. Comparing encodings also
// keeps equality.Semantic's view of values whose Go form varies but whose meaning does
// not (a resource.Quantity's cached string). What the encoding leaves out (unexported
// fields, fields tagged json:"-") is not watched. An object that does not encode (a
// MarshalJSON that fails or panics, a NaN) is watched through a DeepCopyObject instead,
// compared with equality.Semantic (a NaN equal to itself), as before; the first one is reported, as an error
// that is not a *MutationError, the way mutations found by writes are.
//
// It costs an encoding per write, and one per object at CheckMutations, and keeps the
// encodings (about the size of the objects' JSON): it is meant for tests, like
// client-go's KUBE_CACHE_MUTATION_DETECTOR.
func (w *Writer[T]) DetectMutations() {
	w.s.mut = &detector[T]{snapshots: make(map[string][]byte)}
}

// detector is the state of a Store's mutation detector, guarded by the store's mu.
type detector[T event.Object] struct {
	// snapshots holds the JSON encoding of each stored object as it was stored.
	snapshots map[string][]byte
	// copies holds, instead, a DeepCopyObject of each stored object that did not encode.
	copies map[string]T
	// found collects the differences writes met, for takeMutations.
	found []suspect
	// enc encodes under the store's write lock.
	enc encoder
	// notJSONReported: the first object that did not encode has been reported.
	notJSONReported bool
}

// suspect is a difference found under the store's lock, turned into an error outside it
// (see resolve): either two encodings to compare, or an error made already.
type suspect struct {
	key       string
	kept, now []byte
	err       error
}

// encoder encodes objects into a buffer it reuses.
type encoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// encode returns obj's JSON encoding, valid until the next call. A panic in a MarshalJSON
// method is returned as an error: the detector runs inside the store's writes.
func (e *encoder) encode(obj any) (data []byte, err error) {
	if e.enc == nil {
		e.enc = json.NewEncoder(&e.buf)
	}
	e.buf.Reset()
	defer func() {
		if v := recover(); v != nil {
			data, err = nil, fmt.Errorf("panic: %v", v)
		}
	}()
	if err := e.enc.Encode(obj); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

// takeMutations returns the mutations found by writes since the last call, and the
// report of the first object found not to encode. The diffs are made here, outside the
// store's lock.
func (w *Writer[T]) takeMutations() []error {
	s := w.s
	if s.mut == nil {
		return nil
	}
	s.mu.Lock()
	found := s.mut.found
	s.mut.found = nil
	s.mu.Unlock()
	var errs []error
	for _, f := range found {
		if err := f.resolve(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// CheckMutations compares every stored object with the snapshot taken when it was stored
// and returns the differences, as *MutationError joined, in key order. It encodes every
// object, under the store's read lock; the diffs are made after.
func (w *Writer[T]) CheckMutations() error {
	s := w.s
	if s.mut == nil {
		return ErrMutationDetectorOff
	}
	var found []suspect
	func() {
		s.mu.RLock()
		defer s.mu.RUnlock()
		keys := make([]string, 0, s.known)
		for key, en := range s.items {
			if _, ok := en.Object(); ok {
				keys = append(keys, key)
			}
		}
		sort.Strings(keys)
		var enc encoder // the store's is the writers'
		for _, key := range keys {
			obj, _ := s.items[key].Object()
			if f, ok := s.mut.check(&enc, key, obj); ok {
				found = append(found, f)
			}
		}
	}()
	var errs []error
	for _, f := range found {
		if err := f.resolve(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// check compares obj with the snapshot kept for key. Called with the store's mu held.
func (d *detector[T]) check(enc *encoder, key string, obj T) (suspect, bool) {
	if kept, ok := d.snapshots[key]; ok {
		now, err := enc.encode(obj)
		switch {
		case err != nil:
			// It encoded when it was stored: something in it changed.
			return suspect{key: key, err: &MutationError{Key: key, Diff: fmt.Sprintf("the object no longer encodes as JSON: %v", err)}}, true
		case bytes.Equal(kept, now):
			return suspect{}, false
		default:
			return suspect{key: key, kept: kept, now: bytes.Clone(now)}, true
		}
	}
	if kept, ok := d.copies[key]; ok && !copyEquality.DeepEqual(kept, obj) {
		// The object is live: its diff is made now, under the lock.
		return suspect{key: key, err: &MutationError{Key: key, Diff: diff(kept, obj)}}, true
	}
	return suspect{}, false
}

// copyEquality compares an object with its DeepCopyObject: equality.Semantic, with a NaN
// equal to itself (a NaN is one reason an object does not encode, and is no change).
var copyEquality = func() conversion.Equalities {
	eq := conversion.Equalities{Equalities: maps.Clone(equality.Semantic.Equalities)}
	if err := eq.AddFuncs(
		func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) },
		func(a, b float32) bool { return a == b || math.IsNaN(float64(a)) && math.IsNaN(float64(b)) },
	); err != nil {
		panic(err)
	}
	return eq
}()

// resolve returns the error f stands for: nil when the two encodings differ in form only
// (the same values, as a MarshalJSON that does not sort a map's keys may write them).
func (f suspect) resolve() error {
	if f.err != nil {
		return f.err
	}
	kept, kerr := decodeGeneric(f.kept)
	now, nerr := decodeGeneric(f.now)
	if kerr != nil || nerr != nil {
		// encoding/json checks what a MarshalJSON writes; this is a safety net.
		return &MutationError{Key: f.key, Diff: diff(string(f.kept), string(f.now))}
	}
	if gocmp.Equal(kept, now) {
		return nil
	}
	return &MutationError{Key: f.key, Diff: diff(kept, now)}
}

// decodeGeneric decodes JSON into maps, slices and scalars, integers as int64 so that
// large ones show exactly, other numbers as float64.
func decodeGeneric(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return numbers(v), nil
}

// numbers replaces the json.Numbers in v, in place, by int64 or float64 values (go-cmp
// would print them as s"1").
func numbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
		return string(v)
	}
	return v
}

// diff is gocmp.Diff, which panics on a struct with unexported fields and no Equal
// method (a user's type, compared in its Go form): it says so instead.
func diff(kept, now any) (out string) {
	defer func() {
		if v := recover(); v != nil {
			out = fmt.Sprintf("(go-cmp cannot show the difference: %v)", v)
		}
	}()
	return gocmp.Diff(kept, now, cmpopts.EquateNaNs())
}

// keep records obj's state for key, checking the state it replaces first. Called with
// the store's mu held for writing.
func (d *detector[T]) keep(key string, prior T, existed bool, obj T) {
	if existed {
		if f, ok := d.check(&d.enc, key, prior); ok {
			d.found = append(d.found, f)
		}
	}
	data, err := d.enc.encode(obj)
	if err == nil {
		d.snapshots[key] = bytes.Clone(data)
		delete(d.copies, key)
		return
	}
	delete(d.snapshots, key)
	if !d.notJSONReported {
		d.notJSONReported = true
		d.found = append(d.found, suspect{key: key, err: fmt.Errorf(
			"mutation detector: cached object %s %w (%v): it and any other such object are compared through %T's DeepCopyObject, which does not see changes below a shallow copy",
			key, errNotJSON, err, obj)})
	}
	copied, ok := obj.DeepCopyObject().(T)
	if !ok {
		// A DeepCopyObject that returns another type: nothing to compare against.
		delete(d.copies, key)
		return
	}
	if d.copies == nil {
		d.copies = make(map[string]T)
	}
	d.copies[key] = copied
}

// drop checks the deleted object's last state and forgets its snapshot. Called with the
// store's mu held for writing.
func (d *detector[T]) drop(key string, prior T) {
	if f, ok := d.check(&d.enc, key, prior); ok {
		d.found = append(d.found, f)
	}
	delete(d.snapshots, key)
	delete(d.copies, key)
}
