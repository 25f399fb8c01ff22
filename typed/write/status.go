package write

import (
	"context"
	"fmt"

	"github.com/typedinformer/typedinformer/controller"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
)

// StatusWriter writes the status of objects of type T, whose status is of type S, through
// the status subresource: clients' UpdateStatus, which changes nothing but the status.
//
// Its Update compares before it writes: a reconcile that only re-asserts the status it
// already wrote makes no API call at all, so it does not trigger itself again through a
// watch event either. (A status write that does change the status does not change
// metadata.generation, so a typed.Loop with the GenerationChanged predicate does not
// reconcile its own status writes.) It compares with a state at least as new as its own
// last write of the object, never with an older cached copy, so no write is ever skipped
// because the cache has not seen the one before it (DESIGN 20).
//
// A StatusWriter is safe for concurrent use by many reconcile workers. To compare with
// its own last writes it remembers, per object, the state each returned, until it is
// given the object at least as new (the cache has caught up): at most 4096 objects, the
// least recently written forgotten first, and none for more than 10 minutes.
type StatusWriter[T event.Object, S any] struct {
	clients func(namespace string) (StatusUpdater[T], error)
	status  func(obj T) *S
	last    *lastWrites[T]
}

// NewStatusWriter returns a StatusWriter that writes through clients, a function from a
// namespace to a client of that namespace (clientset.AppsV1().Deployments,
// FromDynamicNamespaced's, or ClusterScoped's), and finds an object's status with status,
// such as func(d *appsv1.Deployment) *appsv1.DeploymentStatus { return &d.Status }.
// Go infers the type arguments from these two.
func NewStatusWriter[T event.Object, S any, C StatusUpdater[T]](clients func(namespace string) C, status func(obj T) *S) *StatusWriter[T, S] {
	return &StatusWriter[T, S]{
		clients: perNamespace(clients, func(c C) StatusUpdater[T] { return c }),
		status:  status,
		last:    newLastWrites[T](),
	}
}

// Update applies mutate to a copy of obj's status and writes the result through the
// status subresource, unless it equals obj's status (equality.Semantic.DeepEqual), in
// which case it makes no API call. obj is normally the reconciled object from the cache,
// and is never modified; mutate gets a deep copy of its status.
//
// When obj is older (by resource version) than the state this writer's own last write of
// the object returned, mutate is applied to, compared with, and written over that state
// instead: a cache that has not seen the last write yet neither hides a change from the
// comparison nor makes the write conflict. When the two resource versions cannot be
// ordered (they are not decimal), the object is read from the server first.
//
// The write carries the resource version of the state it was computed from, so it never
// overwrites a newer state: on a conflict the object is read again, mutate applied again
// to its current status, and the write retried (client-go's retry.RetryOnConflict with
// retry.DefaultRetry, 5 tries). So mutate should compute the status from what it is given
// and from the state the reconcile observed, as meta.SetStatusCondition does; it must
// not change anything but the status it is given. The status is written in full: a cache
// that drops status fields (a Transform) would erase them.
//
// The status is only ever written to obj itself: an object of the same name with another
// UID (obj was deleted and created again since it was read) is left alone, and obj
// reported gone.
//
// Errors are *WriteErrors: for an object that no longer exists (deleted, or deleted and
// created again) one wrapping ErrGone, for a kind without a status subresource one
// wrapping ErrNoStatusSubresource, and after the last conflict one wrapping the server's
// conflict error. Nil arguments are errors wrapping ErrNilArgument; a client answering a
// write with a nil object, an error wrapping ErrNilObject.
func (w *StatusWriter[T, S]) Update(ctx context.Context, obj T, mutate func(status *S)) error {
	switch {
	case w == nil:
		return fmt.Errorf("%w: the StatusWriter", controller.ErrNilArgument)
	case w.clients == nil:
		return fmt.Errorf("%w: the StatusWriter's clients", controller.ErrNilArgument)
	case w.status == nil:
		return fmt.Errorf("%w: the StatusWriter's status function", controller.ErrNilArgument)
	case mutate == nil:
		return fmt.Errorf("%w: the status mutation", controller.ErrNilArgument)
	case guard.IsNil(obj):
		return fmt.Errorf("%w: the object whose status to update", controller.ErrNilArgument)
	}
	namespace, name := obj.GetNamespace(), obj.GetName()
	fail := func(err error) error {
		return writeError("updating status of", obj, namespace, name, err, false)
	}
	client, err := w.clients(namespace)
	if err != nil {
		return fail(err)
	}
	key := writeKey(namespace, name)
	cur, fresh := w.last.newest(key, obj)
	if fresh == ownIsNewer && event.OtherObject(obj, cur) {
		return fail(errRecreated(obj, cur))
	}
	reread := fresh == unordered
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if reread {
			got, err := readAgain(ctx, client, obj)
			if err != nil {
				return err
			}
			cur = got
		}
		reread = true
		before, desired, err := copies(cur)
		if err != nil {
			return err
		}
		status := w.status(desired)
		if status == nil {
			return fmt.Errorf("%w: the status function returned nil for %s", controller.ErrNilArgument, klog.KObj(cur))
		}
		mutate(status)
		if equality.Semantic.DeepEqual(w.status(before), status) {
			return nil
		}
		written, err := client.UpdateStatus(ctx, desired, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return w.notFound(ctx, client, desired, err)
		}
		if err := answered("UpdateStatus", written, err); err != nil {
			return err
		}
		w.last.record(ctx, key, written)
		klog.FromContext(ctx).V(2).Info("Updated status", "kind", kindOf(obj), "object", klog.KObj(cur))
		return nil
	})
	return fail(err)
}

// notFound tells apart the reasons for UpdateStatus of written to return NotFound: the
// object is gone (also when an object of the same name but another UID has been created
// since), or its kind has no status subresource (the object still exists).
func (w *StatusWriter[T, S]) notFound(ctx context.Context, client StatusUpdater[T], written T, err error) error {
	got, getErr := client.Get(ctx, written.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(getErr):
		return fmt.Errorf("%w: %w", ErrGone, err)
	case getErr != nil:
		return err
	case guard.IsNil(got):
		return fmt.Errorf("%w (reading the object to tell why: %w: the client's Get)", err, ErrNilObject)
	case event.OtherObject(written, got):
		return fmt.Errorf("%w: %w (an object of the same name was created again since, uid %s)", ErrGone, err, got.GetUID())
	default:
		return fmt.Errorf("%w: %w", ErrNoStatusSubresource, err)
	}
}
