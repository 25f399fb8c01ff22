package manager

import (
	"context"
	"errors"
	"fmt"

	"github.com/typedinformer/typedinformer/typed/predicate"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed"
)

// Loop is a typed.Loop that the Manager runs while this replica leads, over a shared
// cache. Create it with NewLoop; relate other caches to it with Related.
type Loop[T event.Object] struct {
	cache   *Cache[T] // the Loop's own handle, held until the Manager stops
	loop    *typed.Loop[T]
	needs   *loopNeeds
	onError func(ctx context.Context, key string, err error) // typed.Options.OnError
}

// NewLoop adds to c's Manager a typed.Loop that reconciles c's keys with r: the Manager
// runs it while this replica leads, and /readyz waits for c (and for the caches of
// Related) to sync. The Loop holds a handle of its own on c, so c may be released. An
// event of c reconciles its key only when it passes every one of preds (see
// predicate.Predicate). Besides events, a key is reconciled when it is enqueued by hand
// (Loop.Enqueue, Enqueue from a reconciler) or by a Trigger (Loop.AddTrigger).
//
// Over a cache of several namespaces it is still one typed.Loop, whose opts.Workers
// workers take the keys of every namespace. Without opts.Metrics, it reports to the
// Manager's Options.Metrics. It returns an error wrapping
// controller.ErrNilArgument for a nil c, r or predicate, ErrReleased for a released c,
// and ErrStopped once the Manager is stopping.
func NewLoop[T event.Object](c *Cache[T], r typed.Reconciler[T], opts typed.Options, preds ...predicate.Predicate[T]) (*Loop[T], error) {
	var zero T
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: NewLoop's cache of %T", controller.ErrNilArgument, zero)
	case guard.IsNil(r):
		return nil, fmt.Errorf("%w: NewLoop's reconciler of %T", controller.ErrNilArgument, zero)
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("%T", zero) // typed.NewLoop's default, which the Manager names it by too
	}
	if guard.IsNil(opts.Metrics) && c.m.opts.Metrics != nil {
		opts.Metrics = c.m.opts.Metrics
	}
	own, err := c.clone()
	if err != nil {
		return nil, err
	}
	loop, err := typed.NewLoop[T](own, r, opts, preds...)
	if err != nil { // a nil predicate
		own.Release()
		return nil, err
	}
	l := &Loop[T]{cache: own, loop: loop, needs: &loopNeeds{name: opts.Name}, onError: opts.OnError}
	for _, mb := range own.members {
		l.needs.entries = append(l.needs.entries, mb.e)
	}
	m := c.m
	err = m.add(&runnable{name: "loop " + opts.Name, leader: true, r: RunnableFunc(func(ctx context.Context) error {
		return l.loop.Run(l.withLoop(ctx)) // a reconcile's context carries l, for Enqueue
	}), handOver: func(ctx, held context.Context) error {
		// Leadership moves on: the successor's cache cannot show the deletions queued
		// here, so they are reconciled while the Lease is still held.
		return l.loop.RunHandingOver(l.withLoop(ctx), l.withLoop(held)) // its reconciles may enqueue too
	}})
	if err != nil {
		own.Release()
		return nil, err
	}
	m.mu.Lock()
	m.loops = append(m.loops, l.needs)
	m.mu.Unlock()
	return l, nil
}

// Related makes every event of secondary's objects that passes every one of preds
// reconcile the keys of l that keysOf maps them to, as typed.Related does, and makes l
// wait for secondary to sync, in each term and for /readyz. The Loop holds a handle of
// its own on secondary, so secondary may be released. A key of a namespace outside l's
// cache is dropped, as it names nothing l reconciles; a key of the wrong scope (see
// ErrInvalidKey) is dropped and reported.
//
// It returns an error wrapping controller.ErrNilArgument for a nil argument, ErrReleased for a
// released secondary, and ErrStopped once the Manager is stopping; a secondary of another
// Manager is an error.
func Related[S event.Object, T event.Object](l *Loop[T], secondary *Cache[S], keysOf func(S) []string, preds ...predicate.Predicate[S]) error {
	var zero S
	switch {
	case l == nil:
		return fmt.Errorf("%w: Related's loop, for %T", controller.ErrNilArgument, zero)
	case secondary == nil:
		return fmt.Errorf("%w: Related's cache of %T", controller.ErrNilArgument, zero)
	case keysOf == nil:
		return fmt.Errorf("%w: Related's mapping of %T", controller.ErrNilArgument, zero)
	case secondary.m != l.cache.m:
		return fmt.Errorf("related cache %s belongs to another manager than loop %q", secondary.Name(), l.needs.name)
	}
	own, err := secondary.clone()
	if err != nil {
		return err
	}
	// A bad predicate is refused here, and by the Loop's Run (typed.Related's rule).
	if err := typed.Related(l.loop, own, inScope(l, keysOf), preds...); err != nil {
		own.Release()
		return err
	}
	m := l.cache.m
	m.mu.Lock()
	for _, mb := range own.members {
		l.needs.entries = append(l.needs.entries, mb.e)
	}
	m.mu.Unlock()
	return nil
}

// inScope keeps the keys of keysOf that l admits. A key of a namespace outside l's cache
// is dropped, as documented; a key of the wrong scope (see ErrInvalidKey) is dropped and
// reported (once per state mapped: a modification maps its prior state too).
func inScope[S event.Object, T event.Object](l *Loop[T], keysOf func(S) []string) func(S) []string {
	return func(obj S) []string {
		var keys []string
		for _, key := range keysOf(obj) {
			switch err := l.admits(key); {
			case err == nil:
				keys = append(keys, key)
			case errors.Is(err, errWrongScope):
				l.reportKey(key, fmt.Errorf("%w: related mapping gave %q for %s/%s: %w",
					ErrInvalidKey, key, obj.GetNamespace(), obj.GetName(), err))
			}
		}
		return keys
	}
}

// reportKey hands err, about key, to typed.Options.OnError, or logs it.
func (l *Loop[T]) reportKey(key string, err error) {
	logger := l.cache.m.logger().WithValues("loop", l.needs.name, "key", key)
	if l.onError != nil {
		defer guard.LogPanic(logger, err, "related key dropped, whose OnError panicked")
		l.onError(context.Background(), key, err)
		return
	}
	logger.Error(err, "Related key dropped")
}
