package fake

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/event"
)

// List is the constraint on a list type L: a runtime.Object with list metadata whose
// items are of the object type, such as *corev1.ConfigMapList or
// *unstructured.UnstructuredList. It has the same method set as the reflect package's
// List constraint, so the fake's L works wherever that one is required.
type List interface {
	runtime.Object
	metav1.ListInterface
}

// The verbs recorded in an Action.
const (
	VerbList  = "list"
	VerbWatch = "watch"
)

// Action records one call to List or Watch, whether or not it succeeded.
type Action struct {
	// Verb is VerbList or VerbWatch.
	Verb string
	// Options is a copy of the options the call was made with.
	Options metav1.ListOptions
}

// change is one entry of the fake's history: what a write did to one key.
type change[T event.Object] struct {
	rv  int64
	key string
	// obj is the new state, or for a deletion the last state stamped with the deletion's
	// resource version (what a watch reports).
	obj T
	// prev is the state before the change; nil for a creation.
	prev T
	typ  watch.EventType
}

// failure is a scripted failure: the next n calls return err.
type failure struct {
	n   int
	err error
}

func (f *failure) take() error {
	if f.n <= 0 {
		return nil
	}
	f.n--
	return f.err
}

// ListerWatcher is an in-memory lister and watcher of objects of type T with list type
// L, for unit tests. It satisfies the reflect package's ListerWatcher[T, L] interface.
// Its zero value is not usable; create one with New. All methods are safe for concurrent
// use.
//
// Objects stored in the fake are never shared with callers: every object passed in or
// returned (by writes, List, Get and on watches) is a deep copy. The fake keeps every
// change since the last compaction, so a test with very many writes may call Compact to
// bound its memory.
type ListerWatcher[T event.Object, L List] struct {
	objType  reflect.Type // T, a pointer type
	listType reflect.Type // L, a pointer type

	mu        sync.Mutex
	rv        int64 // current resource version; 0 before the first write
	compacted int64 // resource versions below this one are gone
	objects   map[string]T
	// history holds every change after compacted, oldest first, so that watches can be
	// replayed and lists read at an older resource version.
	history  []change[T]
	watchers map[*watcher]struct{}
	// watchersChanged is closed and replaced whenever watchers changes, to wake
	// WaitForWatchers.
	watchersChanged chan struct{}
	noWatchList     bool
	holding         bool // HoldWatches
	listFail        failure
	watchFail       failure
	listCalls       int
	watchCalls      int
	actions         []Action
	gvk             schema.GroupVersionKind // of the stored objects, if they carry one
}

// New returns a fake holding deep copies of objs, created in order as if by Create: the
// first gets resource version "1", the next "2", and so on, and watches from any of
// those versions replay the creations after it.
//
// New panics if T or L is not a pointer type, if L has no Items field of T's element
// type, or if a seed cannot be created (nil, no name, or a duplicate key): these are
// mistakes in the test, not conditions to handle.
func New[T event.Object, L List](objs ...T) *ListerWatcher[T, L] {
	f := &ListerWatcher[T, L]{
		objType:         reflect.TypeFor[T](),
		listType:        reflect.TypeFor[L](),
		objects:         map[string]T{},
		watchers:        map[*watcher]struct{}{},
		watchersChanged: make(chan struct{}),
	}
	if f.objType.Kind() != reflect.Pointer {
		panic(fmt.Sprintf("fake.New: object type %v is not a pointer", f.objType))
	}
	if f.listType.Kind() != reflect.Pointer {
		panic(fmt.Sprintf("fake.New: list type %v is not a pointer", f.listType))
	}
	// Fail now rather than at the first List if L cannot hold Ts.
	if err := meta.SetList(f.newList(), []runtime.Object{f.newObject()}); err != nil {
		panic(fmt.Sprintf("fake.New: list type %v cannot hold %v: %v", f.listType, f.objType, err))
	}
	for _, obj := range objs {
		if _, err := f.Create(obj); err != nil {
			panic(fmt.Sprintf("fake.New: cannot seed object: %v", err))
		}
	}
	return f
}

// newObject returns a new, empty T carrying the stored objects' apiVersion and kind, if
// they have one (an unstructured bookmark without a kind would not look like one from a
// server).
func (f *ListerWatcher[T, L]) newObject() T {
	obj := reflect.New(f.objType.Elem()).Interface().(T)
	if !f.gvk.Empty() {
		obj.GetObjectKind().SetGroupVersionKind(f.gvk)
	}
	return obj
}

func (f *ListerWatcher[T, L]) newList() L {
	return reflect.New(f.listType.Elem()).Interface().(L)
}

func copyOf[T event.Object](obj T) T {
	return obj.DeepCopyObject().(T)
}

// resource is the resource named in errors. The fake does not know the resource, so it
// guesses it from the kind, as kubectl does without discovery.
func (f *ListerWatcher[T, L]) resource() schema.GroupResource {
	gvk := f.gvk
	if gvk.Kind == "" {
		gvk.Kind = f.objType.Elem().Name()
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural.GroupResource()
}

// noteKind remembers the apiVersion and kind of written objects for newObject and
// resource.
func (f *ListerWatcher[T, L]) noteKind(obj T) {
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		f.gvk = gvk
	}
}

// key returns the key of obj, or the error the server gives for an object without a name.
func (f *ListerWatcher[T, L]) key(obj T) (string, error) {
	var zero T
	if obj == zero {
		return "", apierrors.NewBadRequest("fake: nil object")
	}
	key, err := event.ObjectKey(obj)
	if err != nil {
		gr := f.resource()
		return "", apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: f.objType.Elem().Name()}, "",
			field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
	}
	return key, nil
}

// Create stores a deep copy of obj under a new resource version and returns a deep copy
// of what was stored. Whatever resource version obj carries is replaced; an empty UID is
// set to one derived from the resource version, so tests can predict it. It returns an
// AlreadyExists error if an object with the same namespace and name exists, and an
// Invalid error if obj has no name.
func (f *ListerWatcher[T, L]) Create(obj T) (T, error) {
	var zero T
	f.mu.Lock()
	defer f.mu.Unlock()
	key, err := f.key(obj)
	if err != nil {
		return zero, err
	}
	f.noteKind(obj)
	if _, ok := f.objects[key]; ok {
		return zero, apierrors.NewAlreadyExists(f.resource(), obj.GetName())
	}
	f.rv++
	stored := copyOf(obj)
	stored.SetResourceVersion(formatRV(f.rv))
	if stored.GetUID() == "" {
		stored.SetUID(types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", f.rv)))
	}
	f.objects[key] = stored
	f.record(change[T]{rv: f.rv, key: key, typ: watch.Added, obj: stored})
	return copyOf(stored), nil
}

// Update replaces the stored object with the same namespace and name by a deep copy of
// obj under a new resource version, and returns a deep copy of what was stored. Like the
// server, it returns a NotFound error if there is no such object, and a Conflict error if
// obj carries a resource version other than the stored one (an empty resource version
// updates unconditionally). An empty UID keeps the stored UID.
func (f *ListerWatcher[T, L]) Update(obj T) (T, error) {
	var zero T
	f.mu.Lock()
	defer f.mu.Unlock()
	key, err := f.key(obj)
	if err != nil {
		return zero, err
	}
	f.noteKind(obj)
	old, ok := f.objects[key]
	if !ok {
		return zero, apierrors.NewNotFound(f.resource(), obj.GetName())
	}
	if rv := obj.GetResourceVersion(); rv != "" && rv != old.GetResourceVersion() {
		return zero, apierrors.NewConflict(f.resource(), obj.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	f.rv++
	stored := copyOf(obj)
	stored.SetResourceVersion(formatRV(f.rv))
	if stored.GetUID() == "" {
		stored.SetUID(old.GetUID())
	}
	f.objects[key] = stored
	f.record(change[T]{rv: f.rv, key: key, typ: watch.Modified, obj: stored, prev: old})
	return copyOf(stored), nil
}

// Delete removes the object with the given namespace (empty for cluster-scoped objects)
// and name under a new resource version and returns its last state carrying that
// resource version, which is also what watches receive, as with a real server. It
// returns a NotFound error if there is no such object.
func (f *ListerWatcher[T, L]) Delete(namespace, name string) (T, error) {
	var zero T
	f.mu.Lock()
	defer f.mu.Unlock()
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	old, ok := f.objects[key]
	if !ok {
		return zero, apierrors.NewNotFound(f.resource(), name)
	}
	f.rv++
	last := copyOf(old)
	last.SetResourceVersion(formatRV(f.rv))
	delete(f.objects, key)
	f.record(change[T]{rv: f.rv, key: key, typ: watch.Deleted, obj: last, prev: old})
	return copyOf(last), nil
}

// Get returns a deep copy of the stored object with the given namespace and name, and
// whether it exists. It is not recorded as an action.
func (f *ListerWatcher[T, L]) Get(namespace, name string) (T, bool) {
	var zero T
	f.mu.Lock()
	defer f.mu.Unlock()
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, ok := f.objects[key]
	if !ok {
		return zero, false
	}
	return copyOf(obj), true
}

// ResourceVersion returns the current resource version: that of the latest write, "0"
// before any.
func (f *ListerWatcher[T, L]) ResourceVersion() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return formatRV(f.rv)
}

// record appends c to the history and delivers it to the open watches. It holds f.mu,
// so every watch sees changes in resource-version order.
func (f *ListerWatcher[T, L]) record(c change[T]) {
	f.history = append(f.history, c)
	for w := range f.watchers {
		if e, ok := eventFor(w.sel, c); ok {
			w.push(e)
		}
	}
}

// eventFor turns a change into the event a watch with selector sel receives, if any. As
// in the API server's watch cache, a change that takes an object out of the selector is a
// deletion of its previous state (with the change's resource version), and one that brings
// it in is an addition.
func eventFor[T event.Object](sel selector, c change[T]) (watch.Event, bool) {
	var zero T
	cur := c.typ != watch.Deleted && sel.matches(c.obj)
	prev := c.prev != zero && sel.matches(c.prev)
	switch {
	case cur && prev:
		return watch.Event{Type: watch.Modified, Object: copyOf(c.obj)}, true
	case cur:
		return watch.Event{Type: watch.Added, Object: copyOf(c.obj)}, true
	case prev:
		last := copyOf(c.prev)
		last.SetResourceVersion(formatRV(c.rv))
		return watch.Event{Type: watch.Deleted, Object: last}, true
	}
	return watch.Event{}, false
}

// sortedKeys returns the keys of objects in the order the server lists them.
func sortedKeys[T any](objects map[string]T) []string {
	keys := make([]string, 0, len(objects))
	for k := range objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// stateAt returns the objects as they were at resource version rv, which must be within
// [f.compacted, f.rv]. It undoes the changes after rv, newest first; the result must not
// be modified when rv is current, since it is then f.objects itself.
func (f *ListerWatcher[T, L]) stateAt(rv int64) map[string]T {
	if rv == f.rv {
		return f.objects
	}
	state := make(map[string]T, len(f.objects))
	for k, v := range f.objects {
		state[k] = v
	}
	var zero T
	for i := len(f.history) - 1; i >= 0 && f.history[i].rv > rv; i-- {
		c := f.history[i]
		if c.prev == zero {
			delete(state, c.key)
		} else {
			state[c.key] = c.prev
		}
	}
	return state
}

// historyAfter returns the changes after resource version rv, which must be at least
// f.compacted.
func (f *ListerWatcher[T, L]) historyAfter(rv int64) []change[T] {
	i := sort.Search(len(f.history), func(i int) bool { return f.history[i].rv > rv })
	return f.history[i:]
}

// List returns the objects selected by opts, as deep copies sorted by namespace/name, in
// a new L whose resource version is that of the state it was read at.
//
// It honours the options the way the API server does: resourceVersion "" and "0" read the
// current state; "N" with resourceVersionMatch unset or NotOlderThan reads the current
// state, or fails with a "Too large resource version" error if N is in the future; "N" with
// Exact reads the state at N, or fails with 410 Gone (Expired) if N is older than the
// compaction point. limit returns at most that many items and a continue token; a list
// with that token returns the next items of the same snapshot, or 410 Gone if the
// snapshot has been compacted. Label selectors and field selectors on metadata.name and
// metadata.namespace are applied. Invalid combinations of options fail as on the server.
//
// A scripted failure (FailList) is returned first; every call is counted and recorded.
func (f *ListerWatcher[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	var zero L
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listCalls++
	f.actions = append(f.actions, Action{Verb: VerbList, Options: *opts.DeepCopy()})
	if err := f.listFail.take(); err != nil {
		return zero, err
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if err := validateList(opts); err != nil {
		return zero, err
	}
	sel, err := parseSelector(opts)
	if err != nil {
		return zero, err
	}

	snapshot := f.rv
	var after string // list keys after this one; "" sorts before every key
	switch {
	case opts.Continue != "":
		tok, err := decodeContinue(opts.Continue)
		if err != nil {
			return zero, err
		}
		if tok.RV > f.rv {
			return zero, apierrors.NewBadRequest("continue key is not valid: resource version is in the future")
		}
		if tok.RV < f.compacted {
			return zero, expiredContinue()
		}
		snapshot, after = tok.RV, tok.Last
	case opts.ResourceVersion != "" && opts.ResourceVersion != "0":
		n, err := parseRV(opts.ResourceVersion)
		if err != nil {
			return zero, err
		}
		if n > f.rv {
			return zero, tooLarge(n, f.rv)
		}
		if opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
			if n < f.compacted {
				return zero, tooOld(n, f.compacted)
			}
			snapshot = n
		}
	}

	state := f.stateAt(snapshot)
	var items []runtime.Object
	remaining := int64(0)
	lastKey := ""
	for _, key := range sortedKeys(state) {
		if key <= after || !sel.matches(state[key]) {
			continue
		}
		if opts.Limit > 0 && int64(len(items)) == opts.Limit {
			remaining++
			continue
		}
		items = append(items, copyOf(state[key]))
		lastKey = key
	}
	list := f.newList()
	if items == nil {
		items = []runtime.Object{}
	}
	if err := meta.SetList(list, items); err != nil {
		return zero, apierrors.NewInternalError(err)
	}
	list.SetResourceVersion(formatRV(snapshot))
	if remaining > 0 {
		list.SetContinue(encodeContinue(snapshot, lastKey))
		// The server counts the remaining items only when it need not filter them.
		if sel.empty() {
			list.SetRemainingItemCount(&remaining)
		}
	}
	return list, nil
}

// Watch opens a watch of the objects selected by opts. Every event carries a deep copy.
//
// With sendInitialEvents unset or false it replays, in order, every change after
// opts.ResourceVersion and then streams live changes. resourceVersion "" and "0" start,
// as on the API server, with a synthetic ADDED event for every current selected object,
// sorted by key (and no bookmark after them); so a watch from the "0" that List returns
// before the first write misses nothing written in between. A resource version older than
// the compaction point gets, as from the API server, a watch that sends one ERROR event
// carrying a 410 Expired *metav1.Status and closes; one in the future gets an ERROR event
// carrying the server's "Too large resource version" timeout status.
//
// With sendInitialEvents=true (a watch-list request, which also needs
// resourceVersionMatch=NotOlderThan) it first sends an ADDED event for every current
// selected object, sorted by key, then, if allowWatchBookmarks is set, a BOOKMARK whose
// object carries the current resource version and the "k8s.io/initial-events-end"
// annotation, and then streams live changes. If SetWatchListSupported(false) was called,
// such a request fails with an Invalid error, as on a server without the WatchList feature.
//
// Selectors are applied as by the server: an update that moves an object out of the
// selector is delivered as DELETED, one that moves it in as ADDED. BOOKMARK events are
// sent only when allowWatchBookmarks is set. When timeoutSeconds is set, the watch ends
// after that long, as the server ends it.
//
// The watch never blocks the fake's writers: events wait in an unbounded buffer until they
// are read. Its result channel is closed when ctx is done, when Stop is called, when the
// watch times out or when CloseWatches is called; Stop is idempotent and, once it returns,
// the watch's goroutine has exited.
//
// A scripted failure (FailWatch) is returned first; every call is counted and recorded.
func (f *ListerWatcher[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchCalls++
	f.actions = append(f.actions, Action{Verb: VerbWatch, Options: *opts.DeepCopy()})
	if err := f.watchFail.take(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := validateWatch(opts, !f.noWatchList); err != nil {
		return nil, err
	}
	sel, err := parseSelector(opts)
	if err != nil {
		return nil, err
	}

	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	rv := opts.ResourceVersion
	currentState := initial || rv == "" || rv == "0"
	var from int64 // where the replay starts, when there is one
	if rv != "" && rv != "0" {
		n, err := parseRV(rv)
		if err != nil {
			return nil, err
		}
		switch {
		case n > f.rv:
			// The server accepts the request and then fails the watch.
			return newErrWatcher(tooLarge(n, f.rv)), nil
		case initial:
			// NotOlderThan n: the current state will do, even if n was compacted.
		case n < f.compacted:
			return newErrWatcher(tooOld(n, f.compacted)), nil
		default:
			from = n
		}
	}

	var timeout time.Duration
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	w := newWatcher(ctx, sel, opts.AllowWatchBookmarks, timeout, f.removeWatcher)
	w.held = f.holding
	w.bookmark = func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		bm := f.newObject()
		bm.SetResourceVersion(formatRV(f.rv))
		w.push(watch.Event{Type: watch.Bookmark, Object: bm})
	}
	// Queue the current state or the replay under f.mu, before any later change, so the
	// watch sees an unbroken sequence.
	switch {
	case currentState:
		for _, key := range sortedKeys(f.objects) {
			if obj := f.objects[key]; sel.matches(obj) {
				w.push(watch.Event{Type: watch.Added, Object: copyOf(obj)})
			}
		}
		if initial && opts.AllowWatchBookmarks {
			bm := f.newObject()
			bm.SetResourceVersion(formatRV(f.rv))
			bm.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
			w.push(watch.Event{Type: watch.Bookmark, Object: bm})
		}
	default:
		for _, c := range f.historyAfter(from) {
			if e, ok := eventFor(sel, c); ok {
				w.push(e)
			}
		}
	}
	f.watchers[w] = struct{}{}
	f.watchersChangedLocked()
	go w.run()
	return w, nil
}

// removeWatcher takes w out of the set of open watches, if it is still there.
func (f *ListerWatcher[T, L]) removeWatcher(w *watcher) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.watchers[w]; ok {
		delete(f.watchers, w)
		f.watchersChangedLocked()
	}
}

func (f *ListerWatcher[T, L]) watchersChangedLocked() {
	close(f.watchersChanged)
	f.watchersChanged = make(chan struct{})
}

// SetWatchListSupported says whether the fake behaves like a server with the WatchList
// feature (the default) or without it, in which case every watch that sets
// sendInitialEvents fails with an Invalid error, as on such a server.
func (f *ListerWatcher[T, L]) SetWatchListSupported(supported bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noWatchList = !supported
}

// Compact discards the history up to the current resource version, like an etcd
// compaction: afterwards, watches from an older resource version, exact lists at one and
// continue tokens from one get 410 Gone. Open watches are not affected.
func (f *ListerWatcher[T, L]) Compact() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.compactLocked(f.rv)
}

// CompactTo discards the history up to resource version rv, so that older resource
// versions get 410 Gone. The compaction point never moves back, so compacting to an older
// resource version than a previous compaction does nothing. It panics if rv is not a
// resource version the fake has reached.
func (f *ListerWatcher[T, L]) CompactTo(rv string) {
	n, err := parseRV(rv)
	if err != nil {
		panic(fmt.Sprintf("fake.CompactTo: %v", err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n > f.rv {
		panic(fmt.Sprintf("fake.CompactTo: resource version %d is newer than the current one, %d", n, f.rv))
	}
	f.compactLocked(n)
}

func (f *ListerWatcher[T, L]) compactLocked(rv int64) {
	if rv <= f.compacted {
		return
	}
	f.compacted = rv
	// Copy, so the discarded changes can be collected.
	f.history = slices.Clone(f.historyAfter(rv))
}

// FailList makes the next n calls to List return err (after being counted and recorded),
// replacing any earlier FailList script. FailList(0, nil) cancels the script. It panics if
// n > 0 and err is nil.
func (f *ListerWatcher[T, L]) FailList(n int, err error) {
	if n > 0 && err == nil {
		panic("fake.FailList: nil error")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listFail = failure{n: n, err: err}
}

// FailWatch makes the next n calls to Watch return err (after being counted and
// recorded), replacing any earlier FailWatch script. FailWatch(0, nil) cancels the script.
// It panics if n > 0 and err is nil.
func (f *ListerWatcher[T, L]) FailWatch(n int, err error) {
	if n > 0 && err == nil {
		panic("fake.FailWatch: nil error")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchFail = failure{n: n, err: err}
}

// CloseWatches ends every open watch as if the server had ended it: each delivers the
// events already sent to it and then closes its result channel. The watches no longer
// count as open once CloseWatches returns.
func (f *ListerWatcher[T, L]) CloseWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.watchers) == 0 {
		return
	}
	for w := range f.watchers {
		w.end()
	}
	clear(f.watchers)
	f.watchersChangedLocked()
}

// HoldWatches makes every watch, open or opened later, hold back its events: writes,
// bookmarks and the end of a watch are queued in order and nothing is delivered until
// ReleaseWatches, as a watch lagging behind the server's writes (a slow watch cache, a
// congested connection) shows them. Lists and writes are answered at once.
func (f *ListerWatcher[T, L]) HoldWatches() { f.holdWatches(true) }

// ReleaseWatches delivers, in order, what HoldWatches held back, and what comes after.
func (f *ListerWatcher[T, L]) ReleaseWatches() { f.holdWatches(false) }

func (f *ListerWatcher[T, L]) holdWatches(held bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holding = held
	for w := range f.watchers {
		w.hold(held)
	}
}

// SendBookmark sends every open watch that set allowWatchBookmarks a BOOKMARK event whose
// object is a new T carrying only the current resource version (and the apiVersion and
// kind of the stored objects, if they carry one), as the server does periodically.
func (f *ListerWatcher[T, L]) SendBookmark() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.watchers {
		if w.bookmarks {
			bm := f.newObject()
			bm.SetResourceVersion(formatRV(f.rv))
			w.push(watch.Event{Type: watch.Bookmark, Object: bm})
		}
	}
}

// Send pushes e as it is (a deep copy of its object, if any) to every open watch,
// regardless of selectors and without touching the resource version or the history. It
// is for fault-injection tests: events of the wrong type, with a nil object, or of type
// ERROR.
func (f *ListerWatcher[T, L]) Send(e watch.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.watchers {
		ev := e
		if v := reflect.ValueOf(e.Object); e.Object != nil && (v.Kind() != reflect.Pointer || !v.IsNil()) {
			ev.Object = e.Object.DeepCopyObject()
		}
		w.push(ev)
	}
}

// Watching returns the number of open watches: those returned by Watch (other than the
// ones that only report an error) that have not been stopped, cancelled, timed out or
// closed by CloseWatches.
func (f *ListerWatcher[T, L]) Watching() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers)
}

// WaitForWatchers blocks until at least n watches are open, so that a test can make a
// change only once the code under test is watching, without sleeping. It returns
// ctx.Err() if ctx is done first.
func (f *ListerWatcher[T, L]) WaitForWatchers(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		open, changed := len(f.watchers), f.watchersChanged
		f.mu.Unlock()
		if open >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ListCalls returns how many times List has been called, including failed calls.
func (f *ListerWatcher[T, L]) ListCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listCalls
}

// WatchCalls returns how many times Watch has been called, including failed calls.
func (f *ListerWatcher[T, L]) WatchCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watchCalls
}

// Actions returns a copy of the record of every List and Watch call, oldest first.
func (f *ListerWatcher[T, L]) Actions() []Action {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Action, len(f.actions))
	for i, a := range f.actions {
		out[i] = Action{Verb: a.Verb, Options: *a.Options.DeepCopy()}
	}
	return out
}
