package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
)

// Trigger is a source of keys from outside the cluster: a webhook, a message queue, a
// timer. Its function calls enqueue (Loop.Enqueue) for each key to reconcile until ctx
// ends, then returns; a non-nil error stops the Manager, as a runnable's does. See
// Loop.AddTrigger.
type Trigger func(ctx context.Context, enqueue func(key string) error) error

// Channel returns a Trigger of the keys received from keys, until it is closed: each
// reconciles its key, as Loop.Enqueue does; an invalid key is logged and skipped. It is
// read only while its Loop runs (while this replica leads), so a sender waits meanwhile,
// as with controller-runtime's source.Channel: send with a select, or buffer the channel,
// if that matters. A nil channel gives a nil Trigger, which AddTrigger refuses.
func Channel(keys <-chan string) Trigger {
	if keys == nil {
		return nil
	}
	return func(ctx context.Context, enqueue func(key string) error) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case key, ok := <-keys:
				if !ok {
					return nil
				}
				switch err := enqueue(key); {
				case errors.Is(err, ErrStopped):
					klog.FromContext(ctx).V(2).Info("Key from a channel not enqueued: the manager is stopping", "key", key)
				case err != nil:
					klog.FromContext(ctx).Error(err, "Key from a channel not enqueued", "key", key)
				}
			}
		}
	}
}

// loopContextKey is the key of the Loop in the contexts of its reconciles.
type loopContextKey struct{}

// enqueuer is what Enqueue finds in a reconcile's context: a *Loop[T].
type enqueuer interface {
	Enqueue(key string) error
}

// Enqueue makes the Loop whose reconcile ctx is the context of reconcile key, as
// Loop.Enqueue does: a reconciler asks for another key, of its own kind, to be
// reconciled (for a key of its own, return typed.Result.RequeueAfter). It returns
// ErrNotInReconcile for any other context.
func Enqueue(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("%w: Enqueue's context", controller.ErrNilArgument)
	}
	l, ok := ctx.Value(loopContextKey{}).(enqueuer)
	if !ok {
		return ErrNotInReconcile
	}
	return l.Enqueue(key)
}

// Enqueue makes l reconcile key (namespace/name, or name for a cluster-scoped object), as
// an event of l's cache for it would, with the priority of a live change; a key already
// waiting is reconciled once. It may be called from anywhere, a reconciler of l included
// (see also the package function Enqueue). While l does not run (the Manager has not
// started, or this replica does not lead), the key waits, and is reconciled once l runs;
// the keys waiting cost memory by key, not by call.
//
// It returns an error wrapping controller.ErrNilArgument for a nil l, ErrInvalidKey for a key
// that names nothing l reconciles (see ErrInvalidKey), and ErrStopped once the Manager is
// shutting down: no term of leadership starts then, so the key would never be reconciled.
func (l *Loop[T]) Enqueue(key string) error {
	if l == nil {
		return fmt.Errorf("%w: Enqueue's loop", controller.ErrNilArgument)
	}
	if _, name := event.SplitKey(key); name == "" {
		return fmt.Errorf("%w: %q names no object", ErrInvalidKey, key)
	}
	if err := l.admits(key); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrInvalidKey, key, err)
	}
	if l.cache.m.stopping() {
		return errShuttingDown
	}
	l.loop.Enqueue(key)
	return nil
}

// AddTrigger runs t, under name (for logs and errors), in each term of l: while this
// replica leads, as l runs. The keys it enqueues are reconciled by l, as Loop.Enqueue's
// are. It returns an error wrapping controller.ErrNilArgument for a nil l or t, and ErrStopped
// once the Manager is stopping.
func (l *Loop[T]) AddTrigger(name string, t Trigger) error {
	switch {
	case l == nil:
		return fmt.Errorf("%w: AddTrigger's loop", controller.ErrNilArgument)
	case t == nil:
		return fmt.Errorf("%w: trigger %q of loop %q", controller.ErrNilArgument, name, l.needs.name)
	}
	return l.cache.m.add(&runnable{name: "trigger " + name + " of loop " + l.needs.name, leader: true,
		r: RunnableFunc(func(ctx context.Context) error {
			err := t(ctx, l.Enqueue)
			if errors.Is(err, ErrStopped) && l.cache.m.stopping() {
				return nil // a key the shutdown refused: the trigger stopped with the Manager
			}
			return err
		})})
}

// errWrongScope is why a key with a namespace names nothing of a cluster-scoped kind, and
// one without a namespace nothing of a namespaced kind.
var errWrongScope = errors.New("wrong scope")

// errShuttingDown is what Loop.Enqueue returns once the Manager is shutting down:
// ErrStopped, and the end of the runs' context, so that a reconcile or trigger that
// returns it is seen as interrupted by the shutdown, not as a failure.
var errShuttingDown = fmt.Errorf("%w: %w", ErrStopped, context.Canceled)

// admits returns nil for a key that can name an object of l's cache, else why not: a key
// of the wrong scope would be reconciled as deleted, its object never being in the cache
// under it, and one of another namespace names nothing l reconciles.
func (l *Loop[T]) admits(key string) error {
	ns, _ := event.SplitKey(key)
	switch c := l.cache; {
	case c.clusterScoped && ns != "":
		return fmt.Errorf("%w: it has a namespace, and loop %q reconciles a cluster-scoped kind", errWrongScope, l.needs.name)
	case !c.clusterScoped && ns == "":
		// A Source of a cluster-scoped kind not declared ClusterScoped caches its objects
		// under names alone: such a key of a live object is the Loop's.
		if _, live := c.Get(key); live && len(c.members) == 1 {
			return nil
		}
		return fmt.Errorf("%w: it has no namespace, and loop %q reconciles a namespaced kind (declare its Source ClusterScoped if it is not)", errWrongScope, l.needs.name)
	case len(c.members) == 1 && c.members[0].namespace == "":
		return nil // all namespaces, or a cluster-scoped resource
	}
	if !slices.ContainsFunc(l.cache.members, func(mb member[T]) bool { return mb.namespace == ns }) {
		return fmt.Errorf("it is outside the namespaces of loop %q", l.needs.name)
	}
	return nil
}

// withLoop returns ctx carrying l, for Enqueue.
func (l *Loop[T]) withLoop(ctx context.Context) context.Context {
	return context.WithValue(ctx, loopContextKey{}, enqueuer(l))
}
