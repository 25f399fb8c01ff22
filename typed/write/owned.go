package write

import (
	"context"
	"fmt"
	"slices"

	"github.com/typedinformer/typedinformer/controller"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
)

// Change says what CreateOrUpdate did.
type Change string

const (
	// Unchanged: the object already was as desired; nothing was written.
	Unchanged Change = "unchanged"
	// Created: the object did not exist and was created.
	Created Change = "created"
	// Updated: the object differed and was updated.
	Updated Change = "updated"
)

// Owned creates and updates objects of type T that an owner of type O controls: each
// carries a controller reference to its owner (metav1.NewControllerRef), so the garbage
// collector deletes it with its owner, and typed.OwnerKeys maps its events to its
// owner's key.
//
// What an object should look like is said by a mutate function applied to its current
// state, as in controller-runtime's controllerutil.CreateOrUpdate, rather than by a
// desired object compared field by field (equality.Semantic.DeepDerivative): a mutation
// can remove a map key or set a field to its zero value, which a desired object cannot
// express, and it keeps what others wrote (labels, annotations, other owner references)
// and the server's defaults without a generic merge. Set the fields you own one by one:
// a mutation that replaces a whole struct the server fills in (a container list, say)
// differs from the stored object every time and writes every time.
//
// An Owned is safe for concurrent use by many reconcile workers. So that a cache (see
// WithCache) that has not seen its last write of an object yet never makes it skip a
// write, it remembers, per object, the state each of its writes returned, until the
// cache shows the object at least as new: at most 4096 objects, the least recently
// written forgotten first, and none for more than 10 minutes. Only an Owned with a cache
// remembers (one without reads the server before every write, so it has nothing to
// correct); the copies made from it share what it remembers, and a copy WithCache makes
// of an Owned without a cache starts remembering from its own writes.
type Owned[O event.Object, T event.Object] struct {
	clients   func(namespace string) (OwnedClient[T], error)
	ownerKind schema.GroupVersionKind
	cache     CacheReader[T]
	last      *lastWrites[T]
}

// NewOwned returns an Owned that writes through clients, a function from a namespace to a
// client of that namespace (clientset.CoreV1().ConfigMaps, FromDynamicNamespaced's, or
// ClusterScoped's), for owners of type O whose apiVersion and kind are ownerKind: the
// owner's type is named, and Go infers the rest,
//
//	configMaps := write.NewOwned[*Website](clientset.CoreV1().ConfigMaps, websiteKind)
//
// The owner kind is given here, once, because nothing else can say it reliably: objects
// from generated clients carry no apiVersion and kind, and a custom resource's Go struct
// is in no scheme. A wrong kind in an owner reference would silently keep the garbage
// collector from deleting the object with its owner.
func NewOwned[O event.Object, T event.Object, C OwnedClient[T]](clients func(namespace string) C, ownerKind schema.GroupVersionKind) *Owned[O, T] {
	return &Owned[O, T]{
		clients:   perNamespace(clients, func(c C) OwnedClient[T] { return c }),
		ownerKind: ownerKind,
	}
}

// WithCache returns a copy of o that first compares with the object cache holds, usually
// the Store of a controller watching the owned kind: when the mutation changes nothing
// there, CreateOrUpdate makes no API call at all. Otherwise it reads the object from the
// server and decides on that, so a stale cache, or one whose Transform dropped fields,
// never causes a write of stale data.
//
// A cached object older (by resource version) than the state o's own last write of it
// returned is not compared with: that state is, so that a cache that has not seen the
// write yet never makes CreateOrUpdate skip a write that brings the object back to what
// the cache still shows (DESIGN 20). A cached object whose resource version cannot be
// ordered against that state (not decimal) is not compared with at all.
func (o *Owned[O, T]) WithCache(cache CacheReader[T]) *Owned[O, T] {
	if o == nil {
		return nil
	}
	c := *o
	c.cache = cache
	if c.last == nil {
		c.last = newLastWrites[T]()
	}
	return &c
}

// CreateOrUpdate makes the object namespace/name what mutate says, controlled by owner.
//
// If the object does not exist, mutate is applied to a new object with that namespace and
// name, the controller reference added, and the object created. If it exists, mutate is
// applied to a copy of it, the controller reference added unless it is there, and the
// result written only if it differs from the object (equality.Semantic.DeepEqual): the
// object as read from the server, or, with WithCache, first the cached object or the
// state o's own last write of it returned, whichever is newer.
// mutate may set anything but the namespace and name; for a custom resource written
// through the dynamic client, it must set the object's apiVersion and kind (see
// Dynamic.Create). The update carries the resource version that was read, and a conflict
// (or a create that finds the object created meanwhile) reads it again and retries, with
// client-go's retry.DefaultRetry (5 tries).
//
// An existing object controlled by another owner is never written: the error is a
// *WriteError wrapping an *OwnerConflictError (errors.Is ErrControlledByOther). An
// existing object with no controller is adopted, and the adoption logged. An owner that
// cannot own the object is an error wrapping ErrInvalidOwner; nil arguments are errors
// wrapping ErrNilArgument; a client answering a write with a nil object, one wrapping
// ErrNilObject. Every error is a *WriteError naming the object.
func (o *Owned[O, T]) CreateOrUpdate(ctx context.Context, owner O, namespace, name string, mutate func(obj T)) (Change, error) {
	var zero T
	fail := func(err error) (Change, error) {
		return Unchanged, &WriteError{Op: "creating or updating", Kind: kindOf(zero), Namespace: namespace, Name: name, Err: err}
	}
	ref, client, err := o.prepare(owner, namespace, name, mutate == nil, "the mutation")
	if err != nil {
		return fail(err)
	}
	key := writeKey(namespace, name)
	if !guard.IsNil(o.cache) {
		if cached, ok := o.cache.GetByName(namespace, name); ok && !guard.IsNil(cached) {
			if cur, fresh := o.last.newest(key, cached); fresh != unordered {
				if _, same, err := desired(cur, ref, mutate); err == nil && same {
					return Unchanged, nil
				}
			}
		}
	}
	logger := klog.FromContext(ctx).WithValues("kind", kindOf(zero), "object", klog.KRef(namespace, name))
	change := Unchanged
	err = retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		cur, err := client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			obj := newObject[T]()
			obj.SetNamespace(namespace)
			obj.SetName(name)
			mutate(obj)
			if err := keptName(obj, namespace, name); err != nil {
				return err
			}
			setControllerRef(obj, ref)
			created, err := client.Create(ctx, obj, metav1.CreateOptions{})
			if err := answered("Create", created, err); err != nil {
				return err
			}
			o.last.record(ctx, key, created)
			change = Created
			logger.V(2).Info("Created owned object", "owner", klog.KObj(owner))
			return nil
		}
		if err := answered("Get", cur, err); err != nil {
			return err
		}
		obj, same, err := desired(cur, ref, mutate)
		if err != nil || same {
			change = Unchanged
			return err
		}
		updated, err := client.Update(ctx, obj, metav1.UpdateOptions{})
		if err := answered("Update", updated, err); err != nil {
			return err
		}
		o.last.record(ctx, key, updated)
		change = Updated
		if metav1.GetControllerOfNoCopy(cur) == nil {
			// Not silent: the object may have been made by hand.
			logger.Info("Adopted an object that had no controller", "owner", klog.KObj(owner))
		} else {
			logger.V(2).Info("Updated owned object", "owner", klog.KObj(owner))
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return change, nil
}

// prepare checks the arguments of a write of namespace/name owned by owner (noFn: the
// function describing the object, named fn, is nil) and returns the controller reference
// the object should carry and the client of its namespace.
func (o *Owned[O, T]) prepare(owner O, namespace, name string, noFn bool, fn string) (metav1.OwnerReference, OwnedClient[T], error) {
	switch {
	case o == nil:
		return metav1.OwnerReference{}, nil, fmt.Errorf("%w: the Owned", controller.ErrNilArgument)
	case o.clients == nil:
		return metav1.OwnerReference{}, nil, fmt.Errorf("%w: the Owned's clients", controller.ErrNilArgument)
	case noFn:
		return metav1.OwnerReference{}, nil, fmt.Errorf("%w: %s", controller.ErrNilArgument, fn)
	case guard.IsNil(owner):
		return metav1.OwnerReference{}, nil, fmt.Errorf("%w: the owner", controller.ErrNilArgument)
	case name == "":
		return metav1.OwnerReference{}, nil, fmt.Errorf("%w: the object's name", controller.ErrNilArgument)
	}
	ref, err := o.controllerRef(owner, namespace)
	if err != nil {
		return ref, nil, err
	}
	client, err := o.clients(namespace)
	return ref, client, err
}

// controllerRef returns the controller reference to owner that an object in namespace
// should carry.
func (o *Owned[O, T]) controllerRef(owner O, namespace string) (metav1.OwnerReference, error) {
	return controllerRef(o.ownerKind, owner, namespace)
}

// controllerRef returns the controller reference to owner, of kind, that an object in
// namespace should carry, or an error wrapping ErrInvalidOwner.
func controllerRef[O event.Object](kind schema.GroupVersionKind, owner O, namespace string) (metav1.OwnerReference, error) {
	switch got := owner.GetObjectKind().GroupVersionKind(); {
	case kind.Version == "" || kind.Kind == "":
		return metav1.OwnerReference{}, fmt.Errorf("%w: the writer was made with no owner kind (%q)", ErrInvalidOwner, kind)
	case owner.GetName() == "" || owner.GetUID() == "":
		return metav1.OwnerReference{}, fmt.Errorf("%w: %s %s has no name or UID: pass it as read from the server", ErrInvalidOwner, kind.Kind, klog.KObj(owner))
	case !got.Empty() && got != kind:
		return metav1.OwnerReference{}, fmt.Errorf("%w: %s is a %s, not the %s the writer was made with", ErrInvalidOwner, klog.KObj(owner), got, kind)
	case owner.GetNamespace() != "" && owner.GetNamespace() != namespace:
		return metav1.OwnerReference{}, fmt.Errorf("%w: %s %s is in namespace %q and cannot own an object in %q", ErrInvalidOwner, kind.Kind, klog.KObj(owner), owner.GetNamespace(), namespace)
	}
	return *metav1.NewControllerRef(owner, kind), nil
}

// desired returns cur with mutate applied and the controller reference ref set, and
// whether that is the same as cur. It refuses an object that another owner controls.
func desired[T event.Object](cur T, ref metav1.OwnerReference, mutate func(T)) (T, bool, error) {
	if err := controlledBy(cur, ref); err != nil {
		var zero T
		return zero, false, err
	}
	before, obj, err := copies(cur)
	if err != nil {
		return obj, false, err
	}
	mutate(obj)
	if err := keptName(obj, cur.GetNamespace(), cur.GetName()); err != nil {
		return obj, false, err
	}
	setControllerRef(obj, ref)
	return obj, equality.Semantic.DeepEqual(before, obj), nil
}

// keptName checks that a mutation left the object's namespace and name alone.
func keptName[T event.Object](obj T, namespace, name string) error {
	if obj.GetNamespace() != namespace || obj.GetName() != name {
		return fmt.Errorf("the mutation changed the object's namespace/name to %s", klog.KObj(obj))
	}
	return nil
}

// setControllerRef puts ref on obj, replacing a reference to the same owner (by UID),
// and keeps every other reference.
func setControllerRef[T event.Object](obj T, ref metav1.OwnerReference) {
	refs := slices.Clone(obj.GetOwnerReferences())
	if i := slices.IndexFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == ref.UID }); i >= 0 {
		refs[i] = ref
	} else {
		refs = append(refs, ref)
	}
	obj.SetOwnerReferences(refs)
}
