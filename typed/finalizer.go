package typed

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/nilness"
	"github.com/typedinformer/typedinformer/reflect"
)

// Finalizer keeps a finalizer on the objects a reconciler handles, so that the API server
// deletes none of them before the reconciler's cleanup has succeeded. It is the way to
// see every deletion, also one that happened while no replica ran: a Loop reconciles a
// deletion with the last known state only while it runs (see Loop.Run), but an object
// with a finalizer stays, marked with a deletionTimestamp, until the finalizer is
// removed, and the next replica to run reconciles it.
//
// Every write is a JSON merge patch of metadata.finalizers that carries the resource
// version the list was read at, so the server refuses it with a conflict if anyone
// changed the object meanwhile, and a finalizer that another writer added or removed is
// never lost. On a conflict the object is read again and the patch recomputed, with
// client-go's retry.DefaultRetry backoff (5 tries).
type Finalizer[T event.Object] struct {
	name    string
	clients func(namespace string) (Patcher[T], error)
	cleanup func(ctx context.Context, obj T) error
}

// NewFinalizer returns a Finalizer named name (a qualified name such as
// "example.com/cleanup") that writes through clients, a function from a namespace to a
// client of that namespace: clientset.AppsV1().Deployments, FromDynamicNamespaced's, or
// ClusterScoped's. cleanup is what must be done before an object may go; it must be
// idempotent, since it runs again when removing the finalizer fails.
func NewFinalizer[T event.Object, C Patcher[T]](clients func(namespace string) C, name string, cleanup func(ctx context.Context, obj T) error) *Finalizer[T] {
	return &Finalizer[T]{
		name:    name,
		clients: perNamespace(clients, func(c C) Patcher[T] { return c }),
		cleanup: cleanup,
	}
}

// Handle is called first in a reconcile, and the reconcile continues only when it returns
// false and no error:
//
//	if deleted, err := finalizer.Handle(ctx, req); deleted || err != nil {
//		return typed.Result{}, err
//	}
//
// For a live object it adds the finalizer unless it is there (no API call when it is)
// and returns false, or true if a conflict showed that its deletion has started. For an object being deleted (deletionTimestamp set) that carries the
// finalizer, it runs the cleanup and, once that has succeeded, removes the finalizer; it
// returns true, with the cleanup's error if that failed (the Loop then retries the key).
// An object being deleted without the finalizer, and a deleted one (req.Deleted), return
// true at once: the finalizer is never added to an object on its way out, which the API
// server forbids anyway.
//
// Adding the finalizer to an object that no longer exists returns true and a *WriteError
// wrapping ErrGone; removing it from an object that is already gone is a success. Nil
// arguments are errors wrapping ErrNilArgument.
func (f *Finalizer[T]) Handle(ctx context.Context, req Request[T]) (deleted bool, err error) {
	switch {
	case f == nil:
		return false, fmt.Errorf("%w: the Finalizer", ErrNilArgument)
	case f.clients == nil:
		return false, fmt.Errorf("%w: the clients of finalizer %q", ErrNilArgument, f.name)
	case f.cleanup == nil:
		return false, fmt.Errorf("%w: the cleanup of finalizer %q", ErrNilArgument, f.name)
	case f.name == "":
		return false, fmt.Errorf("%w: the finalizer's name", ErrNilArgument)
	case req.Deleted:
		return true, nil
	case nilness.IsNil(req.Object):
		return false, fmt.Errorf("%w: the object of request %q", ErrNilArgument, req.Key)
	}
	obj := req.Object
	client, err := f.clients(obj.GetNamespace())
	if err != nil {
		return false, err
	}
	logger := klog.FromContext(ctx).WithValues("finalizer", f.name)
	if obj.GetDeletionTimestamp() == nil {
		if slices.Contains(obj.GetFinalizers(), f.name) {
			return false, nil
		}
		cur, err := f.patch(ctx, client, obj, func(cur T) ([]string, bool) {
			if cur.GetDeletionTimestamp() != nil || slices.Contains(cur.GetFinalizers(), f.name) {
				return nil, false
			}
			return append(slices.Clone(cur.GetFinalizers()), f.name), true
		})
		if err != nil {
			err = writeError("adding finalizer "+f.name+" to", obj, obj.GetNamespace(), obj.GetName(), err, true)
			return apierrors.IsNotFound(err), err
		}
		if cur.GetDeletionTimestamp() != nil {
			return true, nil // its deletion started meanwhile, without the finalizer
		}
		logger.V(2).Info("Added finalizer", "object", klog.KObj(obj))
		return false, nil
	}
	if !slices.Contains(obj.GetFinalizers(), f.name) {
		return true, nil
	}
	if err := f.cleanup(ctx, obj); err != nil {
		return true, fmt.Errorf("cleanup of finalizer %s for %s %s: %w", f.name, kindOf(obj), klog.KObj(obj), err)
	}
	_, err = f.patch(ctx, client, obj, func(cur T) ([]string, bool) {
		i := slices.Index(cur.GetFinalizers(), f.name)
		if i < 0 {
			return nil, false
		}
		return slices.Delete(slices.Clone(cur.GetFinalizers()), i, i+1), true
	})
	if apierrors.IsNotFound(err) {
		err = nil // gone: nothing is left to remove the finalizer from
	}
	if err != nil {
		return true, writeError("removing finalizer "+f.name+" from", obj, obj.GetNamespace(), obj.GetName(), err, false)
	}
	logger.V(2).Info("Cleaned up and removed finalizer", "object", klog.KObj(obj))
	return true, nil
}

// finalizerPatch is a JSON merge patch of metadata.finalizers. It carries the resource
// version the list was computed from, which the server checks: a merge patch replaces
// the whole list, so it must not apply to a list that has changed since.
type finalizerPatch struct {
	Metadata struct {
		Finalizers      []string `json:"finalizers"`
		ResourceVersion string   `json:"resourceVersion,omitempty"`
	} `json:"metadata"`
}

// patch sets obj's finalizers to what change computes from them, unless change says there
// is nothing to do. On a conflict it reads the object again and recomputes. It returns
// the state change was last given.
func (f *Finalizer[T]) patch(ctx context.Context, client Patcher[T], obj T, change func(cur T) ([]string, bool)) (T, error) {
	cur, reread := obj, false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if reread {
			got, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if nilness.IsNil(got) {
				return fmt.Errorf("%w: the client's Get returned a nil object", reflect.ErrNilResult)
			}
			cur = got
		}
		reread = true
		finalizers, ok := change(cur)
		if !ok {
			return nil
		}
		var p finalizerPatch
		p.Metadata.Finalizers = finalizers
		p.Metadata.ResourceVersion = cur.GetResourceVersion()
		data, err := json.Marshal(p)
		if err != nil {
			return err
		}
		_, err = client.Patch(ctx, cur.GetName(), types.MergePatchType, data, metav1.PatchOptions{})
		return err
	})
	return cur, err
}
