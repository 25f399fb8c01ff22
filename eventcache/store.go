package eventcache

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sort"
	"sync"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// IndexFunc returns the values under which obj is found in one secondary index. It must
// be a pure function of the object. An object it returns an error for, or panics on (an
// error wrapping ErrCallbackPanicked), is left out of the index and the error reported.
type IndexFunc[T event.Object] func(obj T) ([]string, error)

// Indexers names the secondary indexes of a Store.
type Indexers[T event.Object] map[string]IndexFunc[T]

// NamespaceIndex is the name of the index every Store has: objects by namespace ("" for
// cluster-scoped objects). The Writer maintains it itself, with no IndexFunc, because it
// is on every store and is updated on every write.
const NamespaceIndex = "namespace"

// Store is a read-only view of the known objects: what the consumer has applied. The
// consumer applies each key's events before it hands them to the handlers, so a handler
// always finds at least the state its event carries. Any number of goroutines may read it. Only the Writer it came from can
// change it, so who may write is visible in the types.
//
// Objects are shared, not copied: callers must treat every returned object as read-only,
// as with client-go's listers, and change a DeepCopy. Tests can catch violations with
// the mutation detector (Writer.DetectMutations, controller.Options.DetectMutations).
type Store[T event.Object] struct {
	mu sync.RWMutex
	// items holds one entry per key, which holds the key's object when the key is known
	// (queue.Entry.Object) and, for an EventQueueCollection reading this store, the key's
	// pending events: an event costs the pipeline one lookup of its key (see entryIndex).
	// An update changes the entry rather than the map. Entries of keys that are pending
	// and not known are in items too; known counts the others, which are what readers see.
	items    map[string]*queue.Entry[T]
	known    int
	indexers Indexers[T]
	// indices maps index name -> indexed value -> key -> entry, so that a lookup by index
	// reads the objects without going through items. Only known entries are indexed.
	indices map[string]map[string]map[string]*queue.Entry[T]
	// nsNames spells each namespace of the namespace index once: entries note it (see
	// set).
	nsNames map[string]string
	// nsSizes, set by reserve, sizes each namespace's key set of the namespace index when
	// it is created, so that the first list does not rehash the sets as they fill.
	nsSizes map[string]int
	// mut is the mutation detector's state, when it is on (see DetectMutations).
	mut *detector[T]
}

// Writer is the single writing handle of a Store. The ResourceTrackingConsumer holds it;
// everybody else gets the read-only Store.
type Writer[T event.Object] struct {
	s *Store[T]
}

// NewWriter returns a Writer over an empty Store with the namespace index and the given
// extra indexes.
func NewWriter[T event.Object](indexers Indexers[T]) *Writer[T] {
	s := &Store[T]{
		items:    make(map[string]*queue.Entry[T]),
		nsNames:  map[string]string{},
		indexers: Indexers[T]{},
		indices:  map[string]map[string]map[string]*queue.Entry[T]{NamespaceIndex: {}},
	}
	for name, fn := range indexers {
		if name == NamespaceIndex {
			continue // built in, and kept without calling an IndexFunc
		}
		s.indexers[name] = guardIndexFunc(fn)
		s.indices[name] = make(map[string]map[string]*queue.Entry[T])
	}
	return &Writer[T]{s: s}
}

// guardIndexFunc returns fn turning a panic into an error: index functions are user code
// run on the consumer's goroutine with the store locked, and an object one panics on is
// left out of that index, as for an error (DESIGN 18).
func guardIndexFunc[T event.Object](fn IndexFunc[T]) IndexFunc[T] {
	if fn == nil {
		return func(T) ([]string, error) { return nil, ErrNilIndexFunc }
	}
	return func(obj T) (values []string, err error) {
		defer func() {
			if v := recover(); v != nil {
				values, err = nil, fmt.Errorf("%w: IndexFunc: %v\n%s", ErrCallbackPanicked, v, debug.Stack())
			}
		}()
		return fn(obj)
	}
}

// Store returns the read-only view of the objects this Writer writes.
func (w *Writer[T]) Store() *Store[T] { return w.s }

// AddIndexers adds secondary indexes and indexes every stored object in them, atomically:
// no reader sees a new index half built. It adds none and returns an error wrapping
// ErrIndexExists when a name is taken (the namespace index included), since replacing an
// index that readers use would change their answers behind their backs. An index
// function's error leaves that object out of that index, and is returned joined with the
// others once every index is built.
func (w *Writer[T]) AddIndexers(indexers Indexers[T]) error {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, fn := range indexers {
		if _, ok := s.indices[name]; ok {
			return fmt.Errorf("index %q: %w", name, ErrIndexExists)
		}
		if fn == nil {
			return fmt.Errorf("index %q: %w", name, ErrNilIndexFunc) // refused once, not on every write
		}
	}
	var errs []error
	for name, fn := range indexers {
		fn := guardIndexFunc(fn)
		idx := make(map[string]map[string]*queue.Entry[T])
		for key, en := range s.items {
			obj, ok := en.Object()
			if !ok {
				continue
			}
			values, err := fn(obj)
			if err != nil {
				errs = append(errs, fmt.Errorf("index %q of %q: %w", name, key, err))
				continue
			}
			for _, v := range values {
				addItem(idx, v, en)
			}
		}
		s.indexers[name], s.indices[name] = fn, idx
	}
	return errors.Join(errs...)
}

// Set stores obj under key and returns the object it replaced, if any. The object is
// always stored; an error means that one of the index functions failed, and obj is then
// missing from that index only.
func (w *Writer[T]) Set(key string, obj T) (prior T, existed bool, err error) {
	prior, existed, _, _, err = w.set(nil, key, obj, false)
	return prior, existed, err
}

// set is Set; with onlyNewer it leaves the store alone, and reports stale, when obj is not
// newer than the stored object (see event.NotNewer). it is key's entry when the caller
// has it (the consumer, from its backlog: see entryConsumer), which saves the lookup.
// recreated says that obj is a different object (by UID) from the one it replaced.
func (w *Writer[T]) set(it *queue.Entry[T], key string, obj T, onlyNewer bool) (prior T, existed, recreated, stale bool, err error) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if it == nil {
		it = s.items[key]
	}
	if it != nil {
		prior, existed = it.Object()
	}
	version, canonical := event.Version(obj.GetResourceVersion())
	if existed && onlyNewer {
		// The entry's note spares reading the prior object (see queue.Entry.SetObject).
		if pv := it.Version(); pv != 0 && canonical && version <= pv || (pv == 0 || !canonical) && event.NotNewer(prior, obj) {
			return prior, true, false, true, nil
		}
	}
	if it == nil {
		it = queue.NewEntry[T](key)
		s.items[key] = it
	}
	if !existed {
		s.known++
	}
	if s.mut != nil {
		s.mut.keep(key, prior, existed, obj)
	}
	// The namespace index is maintained inline: it is on every store, and an IndexFunc
	// call would allocate two slices per update. The entry notes the namespace as the
	// index's key spells it, so an update in the same namespace reads neither the prior
	// object nor a new string's bytes but the shared one's.
	ns := obj.GetNamespace()
	if priorNS := it.Namespace(); !existed || priorNS != ns {
		if existed {
			s.removeFromNamespace(priorNS, key)
		}
		ns = s.addToNamespace(ns, it)
	} else {
		ns = priorNS
	}
	if !canonical {
		version = 0
	}
	uid, _ := event.UIDNote(obj.GetUID())
	if existed {
		// The notes spare reading the prior object, when both UIDs are the server's.
		if priorUID := it.UID(); priorUID != ([16]byte{}) && uid != ([16]byte{}) {
			recreated = priorUID != uid
		} else {
			recreated = event.OtherObject(prior, obj)
		}
	}
	it.SetObject(obj, ns, version, uid)
	if len(s.indexers) == 0 {
		return prior, existed, recreated, false, err
	}
	for name, fn := range s.indexers {
		var old []string
		if existed {
			old, _ = fn(prior)
		}
		cur, ierr := fn(obj)
		if ierr != nil {
			err = fmt.Errorf("index %q of %q: %w", name, key, ierr)
			cur = nil
		}
		if sameValues(old, cur) {
			continue
		}
		idx := s.indices[name]
		for _, v := range old {
			removeKey(idx, v, key)
		}
		for _, v := range cur {
			addItem(idx, v, it)
		}
	}
	return prior, existed, recreated, false, err
}

// Delete removes key and returns the object it held, if any.
func (w *Writer[T]) Delete(key string) (prior T, existed bool) { return w.delete(nil, key) }

// delete is Delete. it is key's entry when the caller has it from its backlog, which
// saves the lookup: the backlog then releases the entry once the batch is applied (see
// entryIndex.Release), so that an addition after the deletion, in the same batch, finds
// it again.
func (w *Writer[T]) delete(it *queue.Entry[T], key string) (prior T, existed bool) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	release := it == nil
	if release {
		it = s.items[key]
	}
	if it == nil {
		return prior, false
	}
	if prior, existed = it.Object(); !existed {
		return prior, false
	}
	s.removeFromNamespace(it.Namespace(), key)
	it.ClearObject()
	s.known--
	if release && !it.Pending() {
		delete(s.items, key) // a pending entry stays for its events (see entryIndex.Release)
	}
	if s.mut != nil {
		s.mut.drop(key, prior)
	}
	for name, fn := range s.indexers {
		old, _ := fn(prior)
		for _, v := range old {
			removeKey(s.indices[name], v, key)
		}
	}
	return prior, true
}

func addItem[T event.Object](idx map[string]map[string]*queue.Entry[T], value string, en *queue.Entry[T]) {
	set := idx[value]
	if set == nil {
		set = make(map[string]*queue.Entry[T])
		idx[value] = set
	}
	set[en.Key()] = en
}

// addToNamespace adds en to the namespace index under ns and returns the index's own
// spelling of ns, which entries note (see set).
func (s *Store[T]) addToNamespace(ns string, en *queue.Entry[T]) string {
	idx := s.indices[NamespaceIndex]
	if idx[ns] == nil {
		if s.nsSizes != nil {
			idx[ns] = make(map[string]*queue.Entry[T], s.nsSizes[ns])
			if delete(s.nsSizes, ns); len(s.nsSizes) == 0 {
				s.nsSizes = nil
			}
		}
		s.nsNames[ns] = ns
	}
	addItem(idx, ns, en)
	return s.nsNames[ns]
}

// removeFromNamespace removes key from the namespace index under ns.
func (s *Store[T]) removeFromNamespace(ns, key string) {
	idx := s.indices[NamespaceIndex]
	if removeKey(idx, ns, key); idx[ns] == nil {
		delete(s.nsNames, ns)
	}
}

func removeKey[T event.Object](idx map[string]map[string]*queue.Entry[T], value, key string) {
	set := idx[value]
	delete(set, key)
	if len(set) == 0 {
		delete(idx, value)
	}
}

func sameValues(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Get returns the object stored under key.
func (s *Store[T]) Get(key string) (T, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if en := s.items[key]; en != nil {
		return en.Object()
	}
	var zero T
	return zero, false
}

// GetByName returns the object with the given namespace ("" for cluster-scoped objects)
// and name, for stores keyed by the default key function.
func (s *Store[T]) GetByName(namespace, name string) (T, bool) {
	if namespace == "" {
		return s.Get(name)
	}
	return s.Get(namespace + "/" + name)
}

// Len returns the number of objects.
func (s *Store[T]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.known
}

// List returns every object, in no particular order.
func (s *Store[T]) List() []T {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]T, 0, s.known)
	for _, en := range s.items {
		if obj, ok := en.Object(); ok {
			out = append(out, obj)
		}
	}
	return out
}

// Keys returns every key, sorted.
func (s *Store[T]) Keys() []string {
	s.mu.RLock()
	keys := make([]string, 0, s.known)
	for k, en := range s.items {
		if _, ok := en.Object(); ok {
			keys = append(keys, k)
		}
	}
	s.mu.RUnlock()
	sort.Strings(keys)
	return keys
}

// ByIndex returns the objects whose index function put them under value in the named
// index. It returns an error wrapping ErrNoIndex for an unknown index.
func (s *Store[T]) ByIndex(index, value string) ([]T, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[index]
	if !ok {
		return nil, fmt.Errorf("index %q: %w", index, ErrNoIndex)
	}
	set := idx[value]
	out := make([]T, 0, len(set))
	for _, en := range set {
		obj, _ := en.Object() // indexed entries are known
		out = append(out, obj)
	}
	return out, nil
}

// ByIndexIn returns the objects of namespace that the named index puts under value. It
// returns an error wrapping ErrNoIndex for an unknown index.
func (s *Store[T]) ByIndexIn(namespace, index, value string) ([]T, error) {
	objs, err := s.ByIndex(index, value)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(objs, func(obj T) bool { return obj.GetNamespace() != namespace }), nil
}

// IndexValues returns the values present in the named index, sorted.
func (s *Store[T]) IndexValues(index string) ([]string, error) {
	s.mu.RLock()
	idx, ok := s.indices[index]
	if !ok {
		s.mu.RUnlock()
		return nil, fmt.Errorf("index %q: %w", index, ErrNoIndex)
	}
	values := make([]string, 0, len(idx))
	for v := range idx {
		values = append(values, v)
	}
	s.mu.RUnlock()
	sort.Strings(values)
	return values, nil
}

// InNamespace returns the objects in namespace, through the namespace index.
func (s *Store[T]) InNamespace(namespace string) []T {
	out, _ := s.ByIndex(NamespaceIndex, namespace)
	return out
}

// reserve makes room for objects in an empty store, so that the first list does not
// rehash the maps as it fills. It changes capacity only, never content.
func (s *Store[T]) reserve(objects []T) {
	sizes := make(map[string]int)
	for _, obj := range objects {
		sizes[obj.GetNamespace()]++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.items) == 0 && len(objects) > 0 {
		s.items = make(map[string]*queue.Entry[T], len(objects))
		s.nsSizes = sizes
	}
}

func (s *Store[T]) has(key string) bool {
	s.mu.RLock()
	en := s.items[key]
	s.mu.RUnlock()
	if en == nil {
		return false
	}
	_, ok := en.Object()
	return ok
}

// Range calls fn for every key and object, in no particular order, until fn returns
// false. The store is read-locked meanwhile: fn must not write to it.
func (s *Store[T]) Range(fn func(key string, obj T) bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, en := range s.items {
		if obj, ok := en.Object(); ok && !fn(k, obj) {
			return
		}
	}
}
