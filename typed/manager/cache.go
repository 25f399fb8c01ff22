package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	goreflect "reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/client"
)

// CacheOptions select what a cache holds. Every field is part of the key that decides
// which Acquire calls share a cache, except Indexers.
type CacheOptions[T event.Object] struct {
	// Namespaces is the cache's scope: none for all namespaces (or a cluster-scoped
	// resource), one namespace, or several, read as one store. Several namespaces are one
	// list+watch per namespace, each shared with every other cache of that namespace (and
	// the same selectors and transform).
	Namespaces []string
	// LabelSelector and FieldSelector, when set, narrow the cache on the server. Caches
	// share when the selectors are equal as strings.
	LabelSelector labels.Selector
	FieldSelector fields.Selector
	// Transform, when set, is applied to each object before it is cached (for example
	// client.StripManagedFields). A function cannot be compared, so TransformName
	// identifies it: caches with the same TransformName share, and a Transform without a
	// TransformName gives a cache of its own, shared with nobody.
	Transform     func(T) (T, error)
	TransformName string
	// Indexers are secondary indexes, read with Cache.ByIndex. They are not part of the
	// sharing key: a shared cache has the indexes of every Acquire so far, each added,
	// even while the cache runs, by the first Acquire that asks for it
	// (controller.Controller.AddIndexers indexes the cached objects at once, atomically).
	// An index name is the cache's, not the handle's: an Acquire that asks for a name the
	// cache has gets the cache's index, whatever function it gives. Go cannot tell two
	// functions apart (a function literal inlined at two call sites is two functions of
	// different code), so name an index after what it computes ("spec.nodeName",
	// "owner"), as client-go's and controller-runtime's index names are. The namespace
	// index (eventcache.NamespaceIndex) is always there, and its name is reserved.
	Indexers eventcache.Indexers[T]
}

// mergeCacheOptions merges the parts of one user's options, such as Index's one index
// each: a field may be set by one part, or by several to the same value (a Transform, which
// cannot be compared, by one only); Indexers unite, each name given once. The result's
// Indexers is a new map, so that the callers' maps are never written.
func mergeCacheOptions[T event.Object](opts []CacheOptions[T]) (CacheOptions[T], error) {
	var m CacheOptions[T]
	var errs []error
	conflict := func(field string, a, b any) {
		errs = append(errs, fmt.Errorf("%w: %s is %v in one part and %v in another", ErrConflictingOptions, field, a, b))
	}
	for _, o := range opts {
		switch {
		case len(o.Namespaces) == 0:
		case len(m.Namespaces) > 0 && !slices.Equal(m.Namespaces, o.Namespaces):
			conflict("Namespaces", m.Namespaces, o.Namespaces)
		default:
			m.Namespaces = o.Namespaces
		}
		switch {
		case o.LabelSelector == nil:
		case m.LabelSelector != nil && m.LabelSelector.String() != o.LabelSelector.String():
			conflict("LabelSelector", m.LabelSelector, o.LabelSelector)
		default:
			m.LabelSelector = o.LabelSelector
		}
		switch {
		case o.FieldSelector == nil:
		case m.FieldSelector != nil && m.FieldSelector.String() != o.FieldSelector.String():
			conflict("FieldSelector", m.FieldSelector, o.FieldSelector)
		default:
			m.FieldSelector = o.FieldSelector
		}
		switch {
		case o.Transform == nil:
		case m.Transform != nil:
			errs = append(errs, fmt.Errorf("%w: two parts set a Transform", ErrConflictingOptions))
		default:
			m.Transform = o.Transform
		}
		switch {
		case o.TransformName == "":
		case m.TransformName != "" && m.TransformName != o.TransformName:
			conflict("TransformName", m.TransformName, o.TransformName)
		default:
			m.TransformName = o.TransformName
		}
		for name, fn := range o.Indexers {
			if _, ok := m.Indexers[name]; ok {
				errs = append(errs, fmt.Errorf("%w: index %q is given twice", ErrConflictingOptions, name))
				continue
			}
			if m.Indexers == nil {
				m.Indexers = eventcache.Indexers[T]{}
			}
			m.Indexers[name] = fn
		}
	}
	return m, errors.Join(errs...)
}

// cacheKey identifies one shared list+watch: one controller.Controller.
type cacheKey struct {
	object, list goreflect.Type
	resource     string
	subset       string
	namespace    string // "" for all namespaces
	labels       string
	fields       string
	transform    string
	private      uint64 // non-zero for a cache with an unnamed Transform: never shared
}

func (k cacheKey) String() string {
	var b strings.Builder
	b.WriteString(cmp.Or(k.resource, k.object.String()))
	if k.subset != "" {
		fmt.Fprintf(&b, " subset=%q", k.subset)
	}
	if k.namespace != "" {
		fmt.Fprintf(&b, " namespace=%s", k.namespace)
	}
	if k.labels != "" {
		fmt.Fprintf(&b, " labels=%q", k.labels)
	}
	if k.fields != "" {
		fmt.Fprintf(&b, " fields=%q", k.fields)
	}
	if k.transform != "" {
		fmt.Fprintf(&b, " transform=%s", k.transform)
	}
	if k.private != 0 {
		fmt.Fprintf(&b, " transform=#%d", k.private)
	}
	return b.String()
}

// entry is one shared controller, of whatever types its key names. Guarded by
// Manager.mu.
type entry struct {
	key    cacheKey
	ctrl   any // *controller.Controller[T, L] of the key's types
	run    func(context.Context) error
	synced func() bool // the controller has synced, and its resource is served
	served *served
	// indexes holds the names of the controller's indexes. Guarded by Manager.indexMu,
	// not Manager.mu.
	indexes map[string]bool
	refs    int
	started bool
	cancel  context.CancelFunc // stops its goroutine, once started
	ended   bool               // its goroutine has returned
	onEnd   []func()           // called, under Manager.mu, when its goroutine returns
}

// Cache is a handle on a shared, typed cache of the objects of one resource in one scope:
// the known objects of one controller.Controller, or of one per namespace read as one
// store. Get one with Acquire and give it back with Release. The objects it returns are
// shared with every other user of the cache and must not be modified.
//
// All methods are safe for concurrent use. Once released, a handle reads as empty and
// its other methods return ErrReleased; a nil handle reads as empty too, and its other
// methods return an error wrapping controller.ErrNilArgument.
type Cache[T event.Object] struct {
	m             *Manager
	name          string
	members       []member[T] // sorted by namespace
	clusterScoped bool        // its Source's: keys have no namespace

	released    atomic.Bool
	releaseOnce sync.Once
	releasing   chan struct{} // closed by Release
	releasedCh  <-chan struct{}
	mu          sync.Mutex
	regs        map[*controller.Registration]struct{} // the handlers added through this handle
}

type member[T event.Object] struct {
	namespace string
	ctrl      shared[T]
	e         *entry
}

// shared is what a Cache uses of one shared controller: everything but its list type,
// which only the Source that made it needs.
type shared[T event.Object] interface {
	Store() *eventcache.Store[T]
	AddHandler(name string, h controller.Handler[T]) (*controller.Registration, error)
	AddIndexers(indexers eventcache.Indexers[T]) error
	WaitForSync(ctx context.Context) error
	Fence(ctx context.Context) error
	eventcache.Watermarked
}

// Acquire returns a handle on the cache of src's objects that opts select, shared with
// every other holder of the same (T, L, Source.Resource, Source.Subset, namespace,
// selectors, transform): one list+watch and one cache for all of them. A cache starts when it is first acquired
// while m runs, or when m starts; it stops, leaving no goroutine, when its last handle is
// released, and in any case when m stops. Both type arguments are inferred from src:
//
//	pods, err := manager.Acquire(m, manager.Namespaced[*corev1.Pod](cs.CoreV1().Pods),
//		manager.CacheOptions[*corev1.Pod]{Namespaces: []string{"a", "b"}})
//	defer pods.Release()
//
// opts is variadic so that it can be left out, and so that the parts of one user's
// options compose, such as Index's one index each. Each field may be set by one part (or
// by several to the same value), and each index name given once; anything else is an
// error wrapping ErrConflictingOptions, never a setting dropped in silence. Several users'
// options are not merged here: each Acquire is one user, and a shared cache has the
// indexes of all (see CacheOptions.Indexers). Acquire returns an error, and no handle, for
// a nil manager, ListerWatcher or index function
// (controller.ErrNilArgument), an invalid scope (ErrScope), an index named
// eventcache.NamespaceIndex (eventcache.ErrIndexExists), a Source of a generic type
// without a Resource (ErrNoResource), and once m has stopped (ErrStopped). Indexes that
// the shared cache lacks are added to it (see CacheOptions.Indexers).
func Acquire[T event.Object, L reflect.List](m *Manager, src Source[T, L], opts ...CacheOptions[T]) (*Cache[T], error) {
	var zero T
	if m == nil {
		return nil, fmt.Errorf("%w: Acquire's manager", controller.ErrNilArgument)
	}
	if src.ListerWatcher == nil {
		return nil, fmt.Errorf("%w: the ListerWatcher of the Source of %T", controller.ErrNilArgument, zero)
	}
	if needsResource[T]() && src.Resource == "" {
		return nil, fmt.Errorf("%w: a Source of %T needs Source.Resource (see Dynamic)", ErrNoResource, zero)
	}
	o, err := mergeCacheOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("cache of %T: %w", zero, err)
	}
	for _, name := range slices.Sorted(maps.Keys(o.Indexers)) {
		switch {
		case o.Indexers[name] == nil:
			return nil, fmt.Errorf("%w: the function of index %q of %T", controller.ErrNilArgument, name, zero)
		case name == eventcache.NamespaceIndex:
			return nil, fmt.Errorf("%w: %q is the built-in namespace index; give yours another name", eventcache.ErrIndexExists, name)
		}
	}
	if o.Transform == nil && o.TransformName != "" {
		return nil, fmt.Errorf("%w: TransformName %q has no Transform", controller.ErrNilArgument, o.TransformName)
	}
	namespaces, err := scope(src.ClusterScoped, o.Namespaces)
	if err != nil {
		return nil, err
	}
	base := cacheKey{
		object:    goreflect.TypeFor[T](),
		list:      goreflect.TypeFor[L](),
		resource:  src.Resource,
		subset:    src.Subset,
		transform: o.TransformName,
	}
	if o.LabelSelector != nil {
		base.labels = o.LabelSelector.String()
	}
	if o.FieldSelector != nil {
		base.fields = o.FieldSelector.String()
	}
	// The ListerWatchers are made before taking the lock, since making one runs user code.
	lws := make([]controller.ListerWatcher[T, L], len(namespaces))
	for i, ns := range namespaces {
		if lws[i], err = listerWatcher(src, ns); err != nil {
			return nil, err
		}
	}

	c, err := newCache(m, src.GroupVersionResource, base, namespaces, lws, o)
	if c != nil {
		c.clusterScoped = src.ClusterScoped
	}
	if err != nil {
		return nil, err
	}
	// Indexes are added outside m.mu: indexing a large cache takes a while.
	if err := c.addIndexers(o.Indexers); err != nil {
		c.Release()
		return nil, err
	}
	return c, nil
}

// newCache returns a handle on the shared controllers of base's key in namespaces,
// creating those that do not exist yet.
func newCache[T event.Object, L reflect.List](m *Manager, gvr schema.GroupVersionResource, base cacheKey, namespaces []string,
	lws []controller.ListerWatcher[T, L], o CacheOptions[T],
) (*Cache[T], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state >= stopped {
		return nil, ErrStopped
	}
	if o.Transform != nil && o.TransformName == "" {
		m.private++
		base.private = m.private
	}
	keys := make([]cacheKey, len(namespaces))
	for i, ns := range namespaces {
		keys[i] = base
		keys[i].namespace = ns
	}
	// The missing controllers are all made before any is registered, so that one New
	// refuses leaves nothing behind.
	made := make([]*entry, len(keys))
	for i, key := range keys {
		if m.entries[key] != nil {
			continue
		}
		var err error
		if made[i], err = newController(m, gvr, key, lws[i], o); err != nil {
			return nil, err
		}
	}
	c := &Cache[T]{m: m, regs: map[*controller.Registration]struct{}{}, releasing: make(chan struct{})}
	names := make([]string, len(keys))
	for i, key := range keys {
		e := m.entries[key]
		if e == nil {
			e = m.newEntryLocked(key, made[i])
		}
		e.refs++
		c.members = append(c.members, member[T]{namespace: key.namespace, ctrl: e.ctrl.(shared[T]), e: e})
		names[i] = key.namespace
	}
	c.name = base.String()
	if len(names) > 1 {
		c.name += " namespaces=" + strings.Join(names, ",")
	} else {
		c.name = keys[0].String()
	}
	return c, nil
}

// scope returns the sorted, distinct namespaces of a cache, [""] for all.
func scope(clusterScoped bool, namespaces []string) ([]string, error) {
	if len(namespaces) == 0 {
		return []string{""}, nil
	}
	if clusterScoped {
		return nil, fmt.Errorf("%w: namespaces %q for a cluster-scoped resource", ErrScope, namespaces)
	}
	ns := slices.Compact(slices.Sorted(slices.Values(namespaces)))
	if len(ns) > 1 && ns[0] == "" {
		return nil, fmt.Errorf(`%w: "" (all namespaces) among namespaces %q`, ErrScope, namespaces)
	}
	return ns, nil
}

// listerWatcher calls src for namespace ns, turning a nil result or a panic into an error.
func listerWatcher[T event.Object, L reflect.List](src Source[T, L], ns string) (lw controller.ListerWatcher[T, L], err error) {
	var zero T
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the Source of %T panicked for namespace %q: %v", zero, ns, v)
		}
	}()
	if lw = src.ListerWatcher(ns); guard.IsNil(lw) {
		return nil, fmt.Errorf("%w: the Source of %T returned no ListerWatcher for namespace %q", controller.ErrNilArgument, zero, ns)
	}
	return lw, nil
}

// addIndexers gives each of c's controllers the indexes of indexers it lacks; a name it
// has already reads its index. An index function's error on an object leaves that object
// out of that index, and is logged.
func (c *Cache[T]) addIndexers(indexers eventcache.Indexers[T]) error {
	if len(indexers) == 0 {
		return nil
	}
	m := c.m
	m.indexMu.Lock()
	defer m.indexMu.Unlock()
	for _, mb := range c.members {
		add := eventcache.Indexers[T]{}
		for name, fn := range indexers {
			if !mb.e.indexes[name] {
				add[name] = fn
			}
		}
		if len(add) == 0 {
			continue
		}
		if err := mb.ctrl.AddIndexers(add); err != nil {
			if errors.Is(err, eventcache.ErrIndexExists) {
				// Only this function adds indexes, under m.indexMu, having checked.
				return fmt.Errorf("cache %s: %w", mb.e.key, err)
			}
			m.logger().Error(err, "index functions failed; the objects they failed on are left out of those indexes", "cache", mb.e.key.String())
		}
		for name := range add {
			mb.e.indexes[name] = true
		}
	}
	return nil
}

// newController returns the entry of a new shared controller of lw, whose requests wait
// while the server does not serve gvr (see served), or controller.New's error.
func newController[T event.Object, L reflect.List](m *Manager, gvr schema.GroupVersionResource, key cacheKey, lw controller.ListerWatcher[T, L], o CacheOptions[T]) (*entry, error) {
	name := key.String()
	resource := name
	if !gvr.Empty() {
		resource = gvr.String()
	}
	if !m.opts.KeepManagedFields {
		// The cache drops them: a client.Dynamic need not decode them.
		if d, ok := any(lw).(*client.Dynamic[T]); ok {
			if without, ok := any(d.WithoutManagedFields()).(controller.ListerWatcher[T, L]); ok {
				lw = without
			}
		}
	}
	s := newServed(name, resource, awaitServed[T, L](m, name, gvr, lw))
	copts := controller.Options[T]{
		Options: reflect.Options[T]{
			Name:         name,
			Transform:    cacheTransform(o.Transform, m.opts),
			OnError:      reportCacheError(name),
			ResyncPeriod: m.opts.ResyncPeriod,
			WatchList:    !m.opts.NoWatchList,
		},
		Metrics:         m.opts.Metrics,
		DetectMutations: m.opts.DetectMutations,
		OnMutation:      func(ctx context.Context, err *eventcache.MutationError) { m.mutation(ctx, name, err) },
	}
	if key.labels != "" || key.fields != "" {
		copts.ListOptions = client.Selectors(o.LabelSelector, o.FieldSelector)
	}
	c, err := controller.New(gate[T, L]{lw: lw, s: s}, copts)
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", name, err)
	}
	s.notifyApplied = c.NotifyApplied
	// The Acquire that creates the entry adds its indexes, as any other does.
	return &entry{
		key:     key,
		ctrl:    c,
		run:     func(ctx context.Context) error { return s.run(ctx, c.Run) },
		synced:  func() bool { return c.HasSynced() && s.serving() },
		served:  s,
		indexes: map[string]bool{eventcache.NamespaceIndex: true},
	}, nil
}

// cacheTransform is the transform of a cache: t, after dropping managedFields and
// interning strings unless the Manager's options say otherwise (see
// Options.KeepManagedFields and Options.NoStringInterning).
func cacheTransform[T event.Object](t func(T) (T, error), opts Options) func(T) (T, error) {
	strip, intern := !opts.KeepManagedFields, !opts.NoStringInterning
	if !strip && !intern {
		return t
	}
	return func(obj T) (T, error) {
		if strip {
			obj, _ = client.StripManagedFields(obj)
		}
		if intern {
			obj, _ = client.InternStrings(obj)
		}
		if t == nil {
			return obj, nil
		}
		return t(obj)
	}
}

// newEntryLocked registers e, and starts it if m runs. Called with m.mu held.
func (m *Manager) newEntryLocked(key cacheKey, e *entry) *entry {
	m.entries[key] = e
	if m.state == running || m.state == stopping {
		m.startEntryLocked(e)
	}
	return e
}

// startEntryLocked runs e's controller until its last handle is released or the caches
// stop. Called with m.mu held, while m runs.
func (m *Manager) startEntryLocked(e *entry) {
	ctx, cancel := context.WithCancel(m.cacheCtx)
	e.started = true
	e.cancel = cancel
	m.caches.Add(1)
	go func() {
		defer m.caches.Done()
		defer cancel()
		// The mutations the controller returns were reported one by one as found.
		if err := withoutMutations(e.run(ctx)); err != nil {
			klog.FromContext(ctx).Error(err, "cache stopped", "cache", e.key.String())
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		e.ended = true
		for _, f := range e.onEnd {
			f()
		}
		e.onEnd = nil
	}()
}

// withoutMutations returns err without the *eventcache.MutationError it joins.
func withoutMutations(err error) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		var mutation *eventcache.MutationError
		if errors.As(err, &mutation) {
			return nil
		}
		return err
	}
	var rest []error
	for _, e := range joined.Unwrap() {
		if e = withoutMutations(e); e != nil {
			rest = append(rest, e)
		}
	}
	return errors.Join(rest...)
}

// release gives back one reference to each of es, stops those that nobody uses any more,
// and returns a channel closed once their goroutines have returned.
func (m *Manager) release(es []*entry) <-chan struct{} {
	done := make(chan struct{})
	m.mu.Lock()
	defer m.mu.Unlock()
	stopping := 0
	for _, e := range es {
		if e.refs--; e.refs > 0 {
			continue
		}
		if m.entries[e.key] == e {
			delete(m.entries, e.key)
		}
		if !e.started || e.ended {
			continue
		}
		e.cancel()
		stopping++
		e.onEnd = append(e.onEnd, func() {
			if stopping--; stopping == 0 {
				close(done)
			}
		})
	}
	if stopping == 0 {
		close(done)
	}
	return done
}

// Name describes the cache: its resource, scope, selectors and transform.
func (c *Cache[T]) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}

// Release gives the handle back: it removes the handlers added through it, and stops the
// cache if this was its last handle. It returns at once, with a channel that is closed
// once the caches it stopped have no goroutine left (at once if it stopped none), so that
// it can be called from a handler of the cache itself. It is idempotent; every call
// returns the same channel.
func (c *Cache[T]) Release() <-chan struct{} {
	if c == nil {
		return closedChan
	}
	c.releaseOnce.Do(func() {
		c.mu.Lock()
		c.released.Store(true)
		close(c.releasing)
		regs := c.regs
		c.regs = nil
		c.mu.Unlock()
		for r := range regs {
			r.Remove()
		}
		es := make([]*entry, len(c.members))
		for i, mb := range c.members {
			es[i] = mb.e
		}
		c.releasedCh = c.m.release(es)
	})
	return c.releasedCh
}

// closedChan is what Release returns for a nil handle: there is nothing to wait for.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// view returns the members to read, none once the handle is released (or for a nil one).
func (c *Cache[T]) view() []member[T] {
	if c == nil || c.released.Load() {
		return nil
	}
	return c.members
}

// memberOf returns the member that holds namespace's objects.
func (c *Cache[T]) memberOf(namespace string) (member[T], bool) {
	ms := c.view()
	if len(ms) == 1 {
		return ms[0], true // all namespaces, or the one namespace whose store has nothing else
	}
	i, ok := slices.BinarySearchFunc(ms, namespace, func(m member[T], ns string) int { return strings.Compare(m.namespace, ns) })
	if !ok {
		return member[T]{}, false
	}
	return ms[i], true
}

// Watermarks returns the shared cache that holds namespace's objects, none for a
// namespace outside the cache: each namespace of a cache of several is a watch of its
// own, with resource versions that are not compared with another's. It makes a Cache
// typed.Consistent, so that a Loop over it reads its own writes.
func (c *Cache[T]) Watermarks(namespace string) []eventcache.Watermarked {
	if mb, ok := c.memberOf(namespace); ok {
		return []eventcache.Watermarked{mb.ctrl}
	}
	return nil
}

// Fence waits until every namespace's store is at least as new as a consistent read of
// it taken now (see controller.Controller.Fence), each in parallel, and returns their
// errors joined.
func (c *Cache[T]) Fence(ctx context.Context) error {
	ms := c.view()
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, mb := range ms {
		wg.Go(func() { errs[i] = mb.ctrl.Fence(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Get returns the object with the given key (namespace/name, or name for a
// cluster-scoped object).
func (c *Cache[T]) Get(key string) (T, bool) {
	ns, _ := event.SplitKey(key)
	if mb, ok := c.memberOf(ns); ok {
		return mb.ctrl.Store().Get(key)
	}
	var zero T
	return zero, false
}

// GetByName returns the object with the given namespace ("" for cluster-scoped objects)
// and name.
func (c *Cache[T]) GetByName(namespace, name string) (T, bool) {
	if mb, ok := c.memberOf(namespace); ok {
		return mb.ctrl.Store().GetByName(namespace, name)
	}
	var zero T
	return zero, false
}

// List returns every object of the cache, of all its namespaces, in no particular order.
func (c *Cache[T]) List() []T {
	var out []T
	for _, mb := range c.view() {
		out = append(out, mb.ctrl.Store().List()...)
	}
	return out
}

// InNamespace returns the objects of one namespace, through the namespace index.
func (c *Cache[T]) InNamespace(namespace string) []T {
	if mb, ok := c.memberOf(namespace); ok {
		return mb.ctrl.Store().InNamespace(namespace)
	}
	return nil
}

// ByIndex returns the objects that the named index (see CacheOptions.Indexers) puts under
// value, in all the cache's namespaces. It returns an error wrapping eventcache.ErrNoIndex
// for an index the cache does not have.
func (c *Cache[T]) ByIndex(index, value string) ([]T, error) {
	var out []T
	for _, mb := range c.view() {
		objs, err := mb.ctrl.Store().ByIndex(index, value)
		if err != nil {
			return nil, fmt.Errorf("cache %s: %w", c.name, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// ByIndexIn returns the objects of one namespace that the named index puts under value,
// so that index values need not carry the namespace: ByIndexIn("shop", "owner", "web")
// finds what "web" of namespace shop owns, not what a "web" of another namespace owns.
// It reads only that namespace's part of a cache of several namespaces. It returns an
// error wrapping eventcache.ErrNoIndex for an index the cache does not have.
func (c *Cache[T]) ByIndexIn(namespace, index, value string) ([]T, error) {
	mb, ok := c.memberOf(namespace)
	if !ok {
		ms := c.view()
		if len(ms) == 0 {
			return nil, nil
		}
		mb = ms[0] // holds nothing of namespace, but says whether the index exists
	}
	objs, err := mb.ctrl.Store().ByIndex(index, value)
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", c.name, err)
	}
	if mb.namespace != namespace {
		// A store of all namespaces, or of another one: keep namespace's objects.
		objs = slices.DeleteFunc(objs, func(o T) bool { return o.GetNamespace() != namespace })
	}
	return objs, nil
}

// Len returns the number of objects in the cache.
func (c *Cache[T]) Len() int {
	n := 0
	for _, mb := range c.view() {
		n += mb.ctrl.Store().Len()
	}
	return n
}

// Keys returns every key, sorted.
func (c *Cache[T]) Keys() []string {
	var out []string
	for _, mb := range c.view() {
		out = append(out, mb.ctrl.Store().Keys()...)
	}
	slices.Sort(out)
	return out
}

// Range calls fn for every key and object, namespace by namespace, until fn returns
// false; fn must not write to the cache.
func (c *Cache[T]) Range(fn func(key string, obj T) bool) {
	more := true
	for _, mb := range c.view() {
		mb.ctrl.Store().Range(func(key string, obj T) bool {
			more = fn(key, obj)
			return more
		})
		if !more {
			return
		}
	}
}

// IndexValues returns the values present in the named index, in all the cache's
// namespaces, sorted. It returns an error wrapping eventcache.ErrNoIndex for an index
// the cache does not have.
func (c *Cache[T]) IndexValues(index string) ([]string, error) {
	var out []string
	for _, mb := range c.view() {
		vs, err := mb.ctrl.Store().IndexValues(index)
		if err != nil {
			return nil, fmt.Errorf("cache %s: %w", c.name, err)
		}
		out = append(out, vs...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// HasSynced reports whether the cache holds the initial list of every one of its
// namespaces (see controller.Controller.HasSynced) and reflects the server: false while
// the server does not serve its resource (see Err), until the cache has relisted; false
// once released.
func (c *Cache[T]) HasSynced() bool {
	ms := c.view()
	for _, mb := range ms {
		if !mb.e.synced() {
			return false
		}
	}
	return len(ms) > 0
}

// WaitForSync blocks until HasSynced is true (returning nil), ctx is done (returning
// ctx.Err(), wrapped with Err when the resource is not served), the handle is released
// (returning ErrReleased, at once for a handle released before), or the Manager stops its
// caches (returning ErrStopped): a cache that stopped will not sync.
func (c *Cache[T]) WaitForSync(ctx context.Context) error {
	if c == nil {
		return fmt.Errorf("%w: a nil Cache", controller.ErrNilArgument)
	}
	if c.released.Load() {
		return ErrReleased
	}
	if c.HasSynced() {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var why atomic.Pointer[error] // ErrReleased or ErrStopped, when one ended the wait
	go func() {
		select {
		case <-c.releasing:
			why.Store(&ErrReleased)
		case <-c.m.stoppedCh:
			why.Store(&ErrStopped)
		case <-ctx.Done():
			return
		}
		cancel()
	}()
	err := c.waitForSync(ctx)
	switch {
	case err == nil || c.HasSynced():
		return nil
	case why.Load() != nil:
		return *why.Load()
	}
	return err
}

func (c *Cache[T]) waitForSync(ctx context.Context) error {
	for _, mb := range c.members {
		if err := mb.ctrl.WaitForSync(ctx); err != nil {
			return c.whyNotSynced(err)
		}
	}
	for {
		var out <-chan struct{}
		for _, mb := range c.members {
			if ch := mb.e.served.readyChan(); !isClosed(ch) {
				out = ch
				break
			}
		}
		if out == nil {
			return nil
		}
		select {
		case <-out:
		case <-ctx.Done():
			return c.whyNotSynced(ctx.Err())
		}
	}
}

// whyNotSynced wraps err, the context's error, with Err.
func (c *Cache[T]) whyNotSynced(err error) error {
	if why := c.Err(); why != nil {
		return fmt.Errorf("%w: %w", err, why)
	}
	return err
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Err returns why the cache does not reflect the server now, or nil. While the server
// does not serve its resource (a list or watch was answered 404 Not Found, as for a
// custom resource whose CustomResourceDefinition was deleted), it is an error wrapping
// ErrResourceNotServed that names the cache and the resource; of a cache of several
// namespaces, one per namespace, joined.
//
// Such a cache stops: its controller makes no request and keeps what it holds (objects
// deleted with their CustomResourceDefinition were delivered to its handlers as
// deletions), the outage is logged once at error level, HasSynced and /readyz say it is
// not synced, and the cache checks whether the resource is served again (see
// Options.CustomResourceDefinitions and Options.ResourceBackoff). Once it is, the cache
// relists: its handlers and loops receive the objects listed as additions (and as
// deletions those that vanished unseen). HasSynced is true again once the relist has been
// handed to the cache, whose store and handlers then get its objects in order, as after
// any relist (a controller reports the sync of its first list only). Its handles,
// handlers and loops stay as they were throughout.
//
// A cache whose Manager does not run yet says so: an error wrapping ErrNotStarted that
// names the cache.
func (c *Cache[T]) Err() error {
	ms := c.view()
	if len(ms) > 0 {
		c.m.mu.Lock()
		started := !slices.ContainsFunc(ms, func(mb member[T]) bool { return !mb.e.started })
		c.m.mu.Unlock()
		if !started {
			return fmt.Errorf("cache %s: %w", c.name, ErrNotStarted)
		}
	}
	var errs []error
	for _, mb := range ms {
		if err := mb.e.served.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// AddHandler registers h under name with the cache, as controller.Controller.AddHandler
// does: h first receives every cached object, then every change. On a cache of several
// namespaces it receives the changes of all of them, one call at a time, and its
// Registration is one for all (controller.Join). The handler is removed when the handle
// is released. It returns an error wrapping controller.ErrNilHandler for a nil h, and
// ErrReleased for a released handle.
func (c *Cache[T]) AddHandler(name string, h controller.Handler[T]) (*controller.Registration, error) {
	if guard.IsNil(h) {
		return nil, fmt.Errorf("%w: handler %q", controller.ErrNilHandler, name)
	}
	if c == nil {
		return nil, fmt.Errorf("%w: a nil Cache", controller.ErrNilArgument)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released.Load() {
		return nil, ErrReleased
	}
	if len(c.members) > 1 {
		// Each controller calls its handlers on goroutines of its own; one handler must
		// still be called one event at a time, as a controller calls it.
		h = &serialHandler[T]{h: h}
	}
	parts := make([]*controller.Registration, 0, len(c.members))
	for _, mb := range c.members {
		r, err := mb.ctrl.AddHandler(name, h)
		if err != nil {
			for _, r := range parts {
				r.Remove()
			}
			return nil, fmt.Errorf("cache %s: %w", c.name, err)
		}
		parts = append(parts, r)
	}
	var reg *controller.Registration
	reg = controller.Join(parts, func() {
		c.mu.Lock()
		delete(c.regs, reg)
		c.mu.Unlock()
	})
	c.regs[reg] = struct{}{}
	return reg, nil
}

// serialHandler calls h one event at a time, whichever goroutine calls it.
type serialHandler[T event.Object] struct {
	mu sync.Mutex
	h  controller.Handler[T]
}

func (s *serialHandler[T]) Handle(ctx context.Context, e event.Event[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.Handle(ctx, e)
}

// clone returns another handle on the same caches, for a Loop to hold.
func (c *Cache[T]) clone() (*Cache[T], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released.Load() {
		return nil, ErrReleased
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state >= stopped {
		return nil, ErrStopped
	}
	for _, mb := range c.members {
		mb.e.refs++
	}
	return &Cache[T]{m: m, name: c.name, members: c.members, clusterScoped: c.clusterScoped, regs: map[*controller.Registration]struct{}{},
		releasing: make(chan struct{})}, nil
}
