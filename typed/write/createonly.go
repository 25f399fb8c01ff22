package write

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/consistency"
)

// CreateOnly makes sure the object namespace/name exists, controlled by owner, and never
// updates it: for objects whose spec cannot change once created (a Job, a
// PersistentVolumeClaim) or that the controller must not change. It returns the object
// and Created, or the object found and Unchanged.
//
// With a cache (WithCache) that holds the object, it makes no API call. Otherwise it
// applies build to a new object with that namespace and name, adds the controller
// reference, and creates it. A create that finds the object there already (the cache
// has not seen it yet, typically this controller's own create of a moment ago, or
// another replica's) is not an error: the object is read from the server and returned,
// and recorded for the reconcile (consistency.Wrote), so that the key is not reconciled
// again before its caches show it. If it was deleted between the create and the read,
// the create is tried again (retry.DefaultRetry).
//
// An object found that is not controlled by owner (another owner's, or one with no
// controller, which CreateOnly would have to update to adopt) is returned with a
// *WriteError wrapping an *OwnerConflictError (errors.Is ErrControlledByOther). Other
// errors are those of CreateOrUpdate.
func (o *Owned[O, T]) CreateOnly(ctx context.Context, owner O, namespace, name string, build func(obj T)) (T, Change, error) {
	var zero T
	fail := func(err error) (T, Change, error) {
		return zero, Unchanged, &WriteError{Op: "creating", Kind: kindOf(zero), Namespace: namespace, Name: name, Err: err}
	}
	ref, client, err := o.prepare(owner, namespace, name, build == nil, "the build function")
	if err != nil {
		return fail(err)
	}
	if !guard.IsNil(o.cache) {
		if cached, ok := o.cache.GetByName(namespace, name); ok && !guard.IsNil(cached) {
			if err := controlledOnlyBy(cached, ref); err != nil {
				return fail(err)
			}
			return cached, Unchanged, nil
		}
	}
	logger := klog.FromContext(ctx).WithValues("kind", kindOf(zero), "object", klog.KRef(namespace, name))
	var got T
	change := Unchanged
	gone := false // the object found by a create was deleted before it could be read
	err = retry.OnError(retry.DefaultRetry, func(error) bool { return gone }, func() error {
		gone = false
		obj := newObject[T]()
		obj.SetNamespace(namespace)
		obj.SetName(name)
		build(obj)
		if err := keptName(obj, namespace, name); err != nil {
			return err
		}
		setControllerRef(obj, ref)
		created, err := client.Create(ctx, obj, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			if err := answered("Create", created, err); err != nil {
				return err
			}
			o.last.record(ctx, writeKey(namespace, name), created)
			got, change = created, Created
			logger.V(2).Info("Created owned object", "owner", klog.KObj(owner))
			return nil
		}
		found, err := client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			gone = true // create it again
			return err
		}
		if err := answered("Get", found, err); err != nil {
			return err
		}
		if err := controlledOnlyBy(found, ref); err != nil {
			return err
		}
		// The caches lag: the next reconcile of this key waits for them to show it.
		consistency.Wrote(ctx, found)
		got = found
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return got, change, nil
}

// controlledOnlyBy returns an *OwnerConflictError unless obj's controller reference is
// ref (by UID): another owner's, or none at all.
func controlledOnlyBy[T interface {
	GetOwnerReferences() []metav1.OwnerReference
}](obj T, ref metav1.OwnerReference) error {
	for _, r := range obj.GetOwnerReferences() {
		if r.Controller != nil && *r.Controller {
			if r.UID == ref.UID {
				return nil
			}
			return &OwnerConflictError{Controller: r, Wanted: ref}
		}
	}
	return &OwnerConflictError{Wanted: ref}
}
