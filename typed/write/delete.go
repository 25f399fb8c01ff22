package write

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/consistency"
)

// Delete deletes the object namespace/name if owner controls it, and reports whether it
// did. The object is found in the cache (WithCache) or else read from the server; one
// that is not there is not an error (deleted is false). An object another owner
// controls, or none, is never deleted: a *WriteError wrapping an *OwnerConflictError
// (errors.Is ErrControlledByOther).
//
// The delete carries the object's UID as a precondition, so that an object made anew
// under the name meanwhile is not deleted for the one checked: when the precondition
// fails (a cache older than the server), the object is read from the server and checked
// again, once. Its dependents (a Job's pods) are deleted in the background, whatever the
// kind's default (batch/v1 Jobs orphan their pods by default).
//
// The deletion is recorded for the reconcile (consistency.Deleted), also when the object
// was gone already: the key is not reconciled again while a cache of the loop still
// holds it, so the next reconcile does not delete, or count, it again.
func (o *Owned[O, T]) Delete(ctx context.Context, owner O, namespace, name string) (deleted bool, err error) {
	var zero T
	fail := func(err error) (bool, error) {
		return false, &WriteError{Op: "deleting", Kind: kindOf(zero), Namespace: namespace, Name: name, Err: err}
	}
	ref, client, err := o.prepare(owner, namespace, name, false, "")
	if err != nil {
		return fail(err)
	}
	var obj T
	found := false
	if !guard.IsNil(o.cache) {
		obj, found = o.cache.GetByName(namespace, name)
		found = found && !guard.IsNil(obj)
	}
	for attempt := 0; ; attempt++ {
		if !found {
			got, err := client.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err := answered("Get", got, err); err != nil {
				return fail(err)
			}
			obj = got
		}
		if err := controlledOnlyBy(obj, ref); err != nil {
			return fail(err)
		}
		err := client.Delete(ctx, name, metav1.DeleteOptions{
			Preconditions:     metav1.NewUIDPreconditions(string(obj.GetUID())),
			PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			consistency.Deleted(ctx, obj)
			o.last.forget(writeKey(namespace, name))
			if err == nil {
				klog.FromContext(ctx).V(2).Info("Deleted owned object", "kind", kindOf(zero), "object", klog.KRef(namespace, name), "owner", klog.KObj(owner))
			}
			return err == nil, nil
		case apierrors.IsConflict(err) && attempt == 0:
			found = false // another object has the name now: read it and check it
		default:
			return fail(err)
		}
	}
}
