package manager

import (
	"errors"
	"fmt"
	goreflect "reflect"
	"slices"
	"strings"

	"github.com/typedinformer/typedinformer/typed/predicate"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
)

// Builder declares a controller in one place: the primary kind it reconciles (For), the
// kinds it owns (Owns), the kinds it watches with a mapping of their own (Watches), its
// predicates and typed.Options; Complete adds the Loop to the Manager. It is
// controller-runtime's builder, typed:
//
//	b := manager.For(m, websites, manager.CacheOptions[*Website]{Namespaces: []string{ns}}).
//		WithKind(websiteKind).WithPredicates(predicate.GenerationChanged)
//	deployments := manager.Owns(b, manager.Namespaced[*appsv1.Deployment](cs.AppsV1().Deployments))
//	configMaps := manager.Owns(b, manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps))
//	loop, err := b.Complete(reconciler)
//
// Go has no generic methods, so what concerns the primary kind is a method (WithKind,
// WithOptions, WithPredicates: their types are the Builder's) and what brings in another
// kind is a generic function taking the Builder (Owns, Watches), whose type arguments Go
// infers from the Builder and the Source: nobody writes a list type, nor *client.List[*X].
// The steps never fail on their own: an error is kept, and Complete returns every one,
// joined, having released every cache the Builder acquired. So a declaration reads as
// the intent, with one error check at its end.
//
// # Owned kinds and the owner's kind
//
// Owns reconciles an object's controller (the owner reference with controller: true, as
// write.Owned and metav1.NewControllerRef write it) when that controller is of the
// primary kind: other owner references, and controllers of other kinds, reconcile
// nothing. An object controlled by another object of the primary kind reconciles that
// object, not the one whose name it may share. The owner's key is namespace/name for a
// namespaced primary kind, in the object's namespace, and its name for a cluster-scoped
// one (a Source made with ClusterScoped), which may own objects in any namespace.
//
// Owner references name their owner by API group and kind, which the Go type T cannot
// say by itself for every T: the kinds of client-go's scheme (every built-in kind) are
// looked up there, and any other type (a custom resource's Go struct, which is in no
// scheme, or *unstructured.Unstructured, which stands for any kind) needs WithKind. It is
// said explicitly rather than read from objects because a Go struct's zero value carries
// no apiVersion and kind, and a wrong guess would silently reconcile nothing. It is the
// same GroupVersionKind that write.NewOwned takes for the controller references it
// writes.
//
// # Caches
//
// For, Owns and Watches acquire their caches at once (so that a reconciler can be given
// them, for example through write.Owned.WithCache) and return handles on them; the Loop
// holds handles of its own. The handles stay valid until they are released, or until the
// Manager stops; a Builder whose Complete failed has released them. Given a Source, Owns
// and Watches acquire a cache in the scope the primary kind implies: an owned or watched
// kind that is namespaced is cached in the primary's namespaces (all namespaces for a
// cluster-scoped primary kind), and a cluster-scoped one cluster-wide. Given a Cache,
// acquired with CacheOptions of the caller's own (selectors, a transform, indexes), they
// use it as it is.
type Builder[T event.Object] struct {
	m             *Manager
	cache         *Cache[T]
	namespaces    []string // the primary's scope: nil for all namespaces
	clusterScoped bool
	kind          schema.GroupVersionKind
	opts          typed.Options
	preds         []predicate.Predicate[T]
	owns          bool
	related       []func(l *Loop[T], owner schema.GroupKind) error
	acquired      []func() <-chan struct{} // Release of every handle the Builder acquired
	errs          []error
	completed     bool
}

// For starts the declaration of a controller of src's objects, cached as opts say (see
// Acquire): it acquires the primary cache at once. Both type arguments are inferred from
// src. A nil m or a failed Acquire is reported by Complete.
func For[T event.Object, L reflect.List](m *Manager, src Source[T, L], opts ...CacheOptions[T]) *Builder[T] {
	var zero T
	o, err := mergeCacheOptions(opts)
	b := &Builder[T]{m: m, namespaces: o.Namespaces, clusterScoped: src.ClusterScoped}
	if m == nil {
		b.fail(fmt.Errorf("For(%T): %w: the manager", zero, controller.ErrNilArgument))
		return b
	}
	if err != nil {
		b.fail(fmt.Errorf("For(%T): %w", zero, err))
		return b
	}
	c, err := Acquire(m, src, o)
	if err != nil {
		b.fail(fmt.Errorf("For(%T): %w", zero, err))
		return b
	}
	b.cache = c
	b.acquired = append(b.acquired, c.Release)
	return b
}

// WithKind names the primary kind's API group, version and kind, which Owns needs for a
// type that is not in client-go's scheme: a custom resource's Go struct, or
// *unstructured.Unstructured. It returns b.
func (b *Builder[T]) WithKind(kind schema.GroupVersionKind) *Builder[T] {
	if b != nil {
		b.kind = kind
	}
	return b
}

// WithOptions sets the Loop's options (see typed.Options); the Loop's Name is the
// primary kind in lower case ("website") when opts.Name is empty and the kind is known.
// It returns b.
func (b *Builder[T]) WithOptions(opts typed.Options) *Builder[T] {
	if b != nil {
		b.opts = opts
	}
	return b
}

// WithPredicates adds predicates on the primary kind's events (see predicate.Predicate): an
// event reconciles its key only when it passes every one. The ready ones need no type
// arguments: b.WithPredicates(predicate.GenerationChanged). A nil predicate is reported by
// Complete. It returns b.
func (b *Builder[T]) WithPredicates(preds ...predicate.Predicate[T]) *Builder[T] {
	if b == nil {
		return b
	}
	var zero T
	for i, p := range preds {
		if p == nil {
			b.fail(fmt.Errorf("WithPredicates(%T): %w: predicate %d", zero, controller.ErrNilArgument, i))
		}
	}
	b.preds = append(b.preds, preds...)
	return b
}

// Cache returns the handle on the primary cache, nil if For failed.
func (b *Builder[T]) Cache() *Cache[T] {
	if b == nil {
		return nil
	}
	return b.cache
}

// Watched is what Owns and Watches take: a Source, whose cache the Builder acquires in the
// scope the primary kind implies; a Source with cache options of its own (Source.With:
// indexes, selectors, a transform); or a *Cache acquired by the caller (of the same
// Manager), used as it is.
type Watched[S event.Object] interface {
	watchedCache(m *Manager, namespaces []string) (c *Cache[S], acquired bool, err error)
	isClusterScoped() bool
}

// watchedCache acquires s's cache: cluster-wide for a cluster-scoped s, in namespaces
// otherwise.
func (s Source[T, L]) watchedCache(m *Manager, namespaces []string) (*Cache[T], bool, error) {
	return withOptions[T, L]{src: s}.watchedCache(m, namespaces)
}

func (s Source[T, L]) isClusterScoped() bool { return s.ClusterScoped }

// With returns s with the cache options that Owns and Watches acquire its cache with, so
// that the owned or watched cache has, for example, the indexes its reconciler reads:
//
//	jobs := manager.Owns(b, manager.Namespaced[*batchv1.Job](cs.BatchV1().Jobs).
//		With(manager.Index("status.active", activeJobs)))
//
// Options compose as Acquire's do. Their Namespaces, when set, replace the scope the
// primary kind implies.
func (s Source[T, L]) With(opts ...CacheOptions[T]) Watched[T] {
	return withOptions[T, L]{src: s, opts: slices.Clone(opts)}
}

// withOptions is a Source with cache options, as Source.With returns it.
type withOptions[T event.Object, L reflect.List] struct {
	src  Source[T, L]
	opts []CacheOptions[T]
}

func (w withOptions[T, L]) watchedCache(m *Manager, namespaces []string) (*Cache[T], bool, error) {
	if w.src.ClusterScoped {
		namespaces = nil
	}
	o, err := mergeCacheOptions(w.opts)
	if err != nil {
		return nil, false, err
	}
	if len(o.Namespaces) == 0 {
		o.Namespaces = namespaces
	}
	c, err := Acquire(m, w.src, o)
	return c, err == nil, err
}

func (w withOptions[T, L]) isClusterScoped() bool { return w.src.ClusterScoped }

// Index returns the CacheOptions of one index, name, computed by fn; Go infers the object
// type from fn: manager.Index("owner", ownerOf) for an ownerOf of type
// func(*batchv1.Job) ([]string, error).
func Index[T event.Object](name string, fn eventcache.IndexFunc[T]) CacheOptions[T] {
	return CacheOptions[T]{Indexers: eventcache.Indexers[T]{name: fn}}
}

func (c *Cache[T]) isClusterScoped() bool { return c != nil && c.clusterScoped }

// watchedCache returns c itself.
func (c *Cache[T]) watchedCache(m *Manager, _ []string) (*Cache[T], bool, error) {
	switch {
	case c == nil:
		return nil, false, fmt.Errorf("%w: a nil Cache", controller.ErrNilArgument)
	case c.released.Load():
		return nil, false, ErrReleased
	case c.m != m:
		return nil, false, fmt.Errorf("cache %s belongs to another manager", c.name)
	}
	return c, false, nil
}

// Owns makes the objects that from's objects name as their controller, when it is of b's
// primary kind, reconcile (see Builder): a Deployment whose controller is a Website
// reconciles that Website, created, changed behind the controller's back, or deleted.
// An event of from's objects counts only when it passes every one of preds. It returns
// the handle on the owned kind's cache, for the reconciler to read (nil if it could not
// be acquired; Complete then says why). Go infers every type argument:
//
//	deployments := manager.Owns(b, manager.Namespaced[*appsv1.Deployment](cs.AppsV1().Deployments))
//
// With Source.With, the owned cache gets options of its own, such as the indexes the
// reconciler reads. A cluster-scoped kind cannot be owned by a namespaced one, which
// Complete reports.
// Called after Complete, Owns does nothing and returns nil; so does Watches.
func Owns[S event.Object, T event.Object](b *Builder[T], from Watched[S], preds ...predicate.Predicate[S]) *Cache[S] {
	var zero S
	if b == nil {
		return nil
	}
	if !guard.IsNil(from) && from.isClusterScoped() && !b.clusterScoped {
		b.fail(fmt.Errorf("Owns(%T): %w: a cluster-scoped kind cannot be owned by a namespaced one", zero, ErrScope))
		return nil
	}
	b.owns = true
	return watchKind(b, "Owns", from, preds, func(owner schema.GroupKind) func(S) []string {
		return controllerKeys[S](owner, b.clusterScoped)
	})
}

// Watches makes the objects of from reconcile the primary keys that keysOf maps them to
// (see typed.Related: for a modification, the old state's keys too), for the events
// that pass every one of preds. It returns the handle on the watched kind's cache, for
// the reconciler to read (nil if it could not be acquired; Complete then says why):
//
//	manager.Watches(b, secrets, func(s *corev1.Secret) []string { return websitesUsing(s) })
//
// The keys must be the primary cache's, namespace/name or name; over a primary cache of
// some namespaces, a key of another namespace is dropped.
func Watches[S event.Object, T event.Object](b *Builder[T], from Watched[S], keysOf func(S) []string, preds ...predicate.Predicate[S]) *Cache[S] {
	var zero S
	if b == nil {
		return nil
	}
	if keysOf == nil {
		b.fail(fmt.Errorf("Watches(%T): %w: the mapping", zero, controller.ErrNilArgument))
		return nil
	}
	return watchKind(b, "Watches", from, preds, func(schema.GroupKind) func(S) []string { return keysOf })
}

// watchKind acquires from's cache and records how Complete relates it to the Loop.
func watchKind[S event.Object, T event.Object](
	b *Builder[T], step string, from Watched[S], preds []predicate.Predicate[S], mapping func(owner schema.GroupKind) func(S) []string,
) *Cache[S] {
	var zero S
	fail := func(err error) *Cache[S] {
		b.fail(fmt.Errorf("%s(%T): %w", step, zero, err))
		return nil
	}
	if b.completed {
		return nil // documented: nothing is left to report an error to
	}
	if guard.IsNil(from) {
		return fail(fmt.Errorf("%w: the Source or Cache", controller.ErrNilArgument))
	}
	for i, p := range preds {
		if p == nil {
			return fail(fmt.Errorf("%w: predicate %d", controller.ErrNilArgument, i))
		}
	}
	if b.m == nil {
		return fail(fmt.Errorf("%w: the manager", controller.ErrNilArgument))
	}
	namespaces := b.namespaces
	if b.clusterScoped {
		namespaces = nil // a cluster-scoped owner's objects are in any namespace
	}
	c, acquired, err := from.watchedCache(b.m, namespaces)
	if err != nil {
		return fail(err)
	}
	if acquired {
		b.acquired = append(b.acquired, c.Release)
	}
	preds = slices.Clone(preds)
	b.related = append(b.related, func(l *Loop[T], owner schema.GroupKind) error {
		if err := Related(l, c, mapping(owner), preds...); err != nil {
			return fmt.Errorf("%s(%T): %w", step, zero, err)
		}
		return nil
	})
	return c
}

func (b *Builder[T]) fail(err error) { b.errs = append(b.errs, err) }

// Complete adds to the Manager a Loop that reconciles the primary kind's keys with r, as
// NewLoop does, related to every owned and watched kind, and returns it: like any Loop,
// it also takes keys by hand (Loop.Enqueue, Enqueue) and from triggers (Loop.AddTrigger).
//
// It returns every error of the declaration, joined, and no Loop, having released every
// cache the Builder acquired: nil arguments (errors.Is controller.ErrNilArgument), caches that
// could not be acquired (see Acquire), a cluster-scoped owned kind of a namespaced owner
// (ErrScope), owned kinds of an unknown owner kind (ErrNoOwnerKind), and a second call
// (ErrAlreadyCompleted).
func (b *Builder[T]) Complete(r typed.Reconciler[T]) (*Loop[T], error) {
	var zero T
	if b == nil {
		return nil, fmt.Errorf("%w: Complete's builder, for %T", controller.ErrNilArgument, zero)
	}
	if b.completed {
		return nil, fmt.Errorf("%w: the builder of %T", ErrAlreadyCompleted, zero)
	}
	b.completed = true
	errs := b.errs
	if guard.IsNil(r) {
		errs = append(errs, fmt.Errorf("Complete(%T): %w: the reconciler", zero, controller.ErrNilArgument))
	}
	kind, known := b.primaryKind()
	if b.owns && !known {
		errs = append(errs, fmt.Errorf("Owns: %w: %T is not in client-go's scheme; name its kind with Builder.WithKind", ErrNoOwnerKind, zero))
	}
	if len(errs) > 0 {
		b.release()
		return nil, errors.Join(errs...)
	}
	opts := b.opts
	if opts.Name == "" && known {
		opts.Name = strings.ToLower(kind.Kind)
	}
	l, err := NewLoop(b.cache, r, opts, b.preds...)
	if err != nil {
		b.release()
		return nil, fmt.Errorf("Complete(%T): %w", zero, err)
	}
	for _, relate := range b.related {
		if err := relate(l, kind.GroupKind()); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Only a Manager that stopped meanwhile fails here: it runs the Loop no more.
		b.release()
		return nil, errors.Join(errs...)
	}
	return l, nil
}

// release gives back every handle the Builder acquired.
func (b *Builder[T]) release() {
	for _, release := range b.acquired {
		release()
	}
	b.acquired = nil
}

// primaryKind returns the kind given to WithKind, else the one client-go's scheme has for
// T, and whether it is known.
func (b *Builder[T]) primaryKind() (schema.GroupVersionKind, bool) {
	if !b.kind.Empty() {
		return b.kind, b.kind.Kind != ""
	}
	if needsResource[T]() {
		return schema.GroupVersionKind{}, false
	}
	t := goreflect.TypeFor[T]()
	if t.Kind() != goreflect.Pointer {
		return schema.GroupVersionKind{}, false
	}
	obj, ok := goreflect.New(t.Elem()).Interface().(T)
	if !ok {
		return schema.GroupVersionKind{}, false
	}
	kinds, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil || len(kinds) == 0 {
		return schema.GroupVersionKind{}, false
	}
	return kinds[0], true
}

// controllerKeys maps an object to the key of its controller, when that is of the given
// group and kind: namespace/name in the object's namespace for a namespaced owner, name
// for a cluster-scoped one. A cluster-scoped object names no namespaced owner.
func controllerKeys[S event.Object](owner schema.GroupKind, clusterScopedOwner bool) func(S) []string {
	return func(obj S) []string {
		ref := metav1.GetControllerOfNoCopy(obj)
		if ref == nil || ref.Kind != owner.Kind || ref.Name == "" {
			return nil
		}
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != owner.Group {
			return nil
		}
		switch ns := obj.GetNamespace(); {
		case clusterScopedOwner:
			return []string{ref.Name}
		case ns == "":
			return nil
		default:
			return []string{ns + "/" + ref.Name}
		}
	}
}
