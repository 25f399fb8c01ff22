package write

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
)

// Finalizer keeps a finalizer on the objects a reconciler handles, so that the API server
// deletes none of them before the reconciler's cleanup has succeeded. It is the way to
// see every deletion, also one that happened while no replica ran: a typed.Loop reconciles a
// deletion with the last known state only while it runs (see typed.Loop.Run), but an object
// with a finalizer stays, marked with a deletionTimestamp, until the finalizer is
// removed, and the next replica to run reconciles it.
//
// Every write is a JSON merge patch of metadata.finalizers that carries the resource
// version the list was read at, so the server refuses it with a conflict if anyone
// changed the object meanwhile, and a finalizer that another writer added or removed is
// never lost. On a conflict the object is read again and the patch recomputed, with
// client-go's retry.DefaultRetry backoff (5 tries). A patch is only ever applied to the
// object it was computed for: one of the same name but another UID (the object was
// deleted and created again) is left alone.
//
// A Finalizer decides on a state at least as new as its own last write of the object
// (DESIGN 20): a stale cached copy, from before the watch delivered that write, neither
// makes it add the finalizer again nor run the cleanup again after it removed the
// finalizer. It is safe for concurrent use by many reconcile workers, and remembers for
// that, per object, the state each of its writes returned, until it is given the object
// at least as new (or deleted): at most 4096 objects, the least recently written
// forgotten first, and none for more than 10 minutes.
type Finalizer[T event.Object] struct {
	name    string
	clients func(namespace string) (Patcher[T], error)
	cleanup func(ctx context.Context, obj T) error
	last    *lastWrites[T]
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
		last:    newLastWrites[T](),
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
// returns true, with the cleanup's error if that failed (the typed.Loop then retries the key).
// An object being deleted without the finalizer, and a deleted one (req.Deleted), return
// true at once: the finalizer is never added to an object on its way out, which the API
// server forbids anyway.
//
// These decisions are made on req.Object, or, when it is older (by resource version) than
// the state this Finalizer's own last write of the object returned, on that state; when
// the two resource versions cannot be ordered (they are not decimal), on the object as
// read from the server. The cleanup is given the state decided on.
//
// Adding the finalizer to an object that no longer exists (deleted, or deleted and
// created again under its name) returns true and a *WriteError wrapping ErrGone; removing
// it from an object that is already gone is a success. Nil arguments are errors wrapping
// ErrNilArgument; a client answering a patch with a nil object, a *WriteError wrapping
// ErrNilObject.
func (f *Finalizer[T]) Handle(ctx context.Context, req typed.Request[T]) (deleted bool, err error) {
	switch {
	case f == nil:
		return false, fmt.Errorf("%w: the Finalizer", controller.ErrNilArgument)
	case f.clients == nil:
		return false, fmt.Errorf("%w: the clients of finalizer %q", controller.ErrNilArgument, f.name)
	case f.cleanup == nil:
		return false, fmt.Errorf("%w: the cleanup of finalizer %q", controller.ErrNilArgument, f.name)
	case f.name == "":
		return false, fmt.Errorf("%w: the finalizer's name", controller.ErrNilArgument)
	case req.Deleted:
		if !guard.IsNil(req.Object) {
			f.last.forget(writeKey(req.Object.GetNamespace(), req.Object.GetName()))
		}
		return true, nil
	case guard.IsNil(req.Object):
		return false, fmt.Errorf("%w: the object of request %q", controller.ErrNilArgument, req.Key)
	}
	obj := req.Object
	namespace, name := obj.GetNamespace(), obj.GetName()
	client, err := f.clients(namespace)
	if err != nil {
		return false, err
	}
	addOp, removeOp := "adding finalizer "+f.name+" to", "removing finalizer "+f.name+" from"
	logger := klog.FromContext(ctx).WithValues("finalizer", f.name)
	state, err := f.newest(ctx, client, obj)
	switch {
	case err == nil:
	case obj.GetDeletionTimestamp() == nil:
		err = writeError(addOp, obj, namespace, name, err, true)
		return apierrors.IsNotFound(err), err
	case apierrors.IsNotFound(err):
		return true, nil // gone: nothing is left to clean up for, nor to remove the finalizer from
	default:
		return true, writeError(removeOp, obj, namespace, name, err, false)
	}
	if state.GetDeletionTimestamp() == nil {
		if slices.Contains(state.GetFinalizers(), f.name) {
			return false, nil
		}
		cur, err := f.patch(ctx, client, obj, state, func(cur T) ([]string, bool) {
			if cur.GetDeletionTimestamp() != nil || slices.Contains(cur.GetFinalizers(), f.name) {
				return nil, false
			}
			return append(slices.Clone(cur.GetFinalizers()), f.name), true
		})
		if err != nil {
			err = writeError(addOp, obj, namespace, name, err, true)
			return apierrors.IsNotFound(err), err
		}
		if cur.GetDeletionTimestamp() != nil {
			return true, nil // its deletion started meanwhile, without the finalizer
		}
		logger.V(2).Info("Added finalizer", "object", klog.KObj(obj))
		return false, nil
	}
	if !slices.Contains(state.GetFinalizers(), f.name) {
		return true, nil
	}
	if err := f.cleanup(ctx, state); err != nil {
		return true, fmt.Errorf("cleanup of finalizer %s for %s %s: %w", f.name, kindOf(obj), klog.KObj(obj), err)
	}
	_, err = f.patch(ctx, client, obj, state, func(cur T) ([]string, bool) {
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
		return true, writeError(removeOp, obj, namespace, name, err, false)
	}
	logger.V(2).Info("Cleaned up and removed finalizer", "object", klog.KObj(obj))
	return true, nil
}

// newest returns the state of obj to decide on: obj, or the state this Finalizer's own
// last write of it returned when obj is older, or, when their resource versions cannot
// be ordered, the object as read from the server. An object that is gone, or that a
// newer state shows replaced by another of the same name, is an error that
// apierrors.IsNotFound sees.
func (f *Finalizer[T]) newest(ctx context.Context, client Patcher[T], obj T) (T, error) {
	var zero T
	state, fresh := f.last.newest(writeKey(obj.GetNamespace(), obj.GetName()), obj)
	switch fresh {
	case ownIsNewer:
		// A copy: the cleanup is given it, and what is remembered is never modified.
		own, _, err := copies(state)
		if err != nil {
			return zero, err
		}
		state = own
	case unordered:
		return readAgain(ctx, client, obj)
	}
	if event.OtherObject(obj, state) {
		return zero, errRecreated(obj, state)
	}
	return state, nil
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

// patch sets obj's finalizers to what change computes from them, starting from state (obj
// or a newer state of it), unless change says there is nothing to do. On a conflict it
// reads the object again and recomputes; an object read again that is not obj (another
// UID) is not patched, and the error says obj is gone. It remembers the state the patch
// returned, and returns the state change was last given.
func (f *Finalizer[T]) patch(ctx context.Context, client Patcher[T], obj, state T, change func(cur T) ([]string, bool)) (T, error) {
	cur, reread := state, false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if reread {
			got, err := readAgain(ctx, client, obj)
			if err != nil {
				return err
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
		written, err := client.Patch(ctx, cur.GetName(), types.MergePatchType, data, metav1.PatchOptions{})
		if err := answered("Patch", written, err); err != nil {
			return err
		}
		f.last.record(ctx, writeKey(obj.GetNamespace(), obj.GetName()), written)
		return nil
	})
	return cur, err
}
