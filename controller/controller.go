// Package controller holds Controller, the facade that wires the pipeline for one object
// type: a Reflector lists and watches a ListerWatcher and writes into an
// EventQueueCollection, whose single drain loop hands each key's events to a
// ResourceTrackingConsumer, which updates the known objects and then hands each event to
// every registered Handler. Each handler has its own goroutine and keyed backlog.
//
// A generated typed client is a ListerWatcher as it is. Go infers New's type arguments,
// the object type from the Options and the list type from the client's List method:
//
//	c, err := controller.New(clientset.CoreV1().ConfigMaps("default"), controller.Options[*corev1.ConfigMap]{})
//	c, err := controller.New(clientset.CoreV1().ConfigMaps("default"), controller.Options[*corev1.ConfigMap]{
//		Options: reflect.Options[*corev1.ConfigMap]{ // the list/watch settings, the reflector's
//			ResyncPeriod: time.Hour,
//			Transform:    client.StripManagedFields[*corev1.ConfigMap],
//		},
//		Indexers: eventcache.Indexers[*corev1.ConfigMap]{"team": teamOf},
//	})
//
// Run starts the consumer before the reflector and stops them in the reverse order, and
// returns only when no goroutine of the controller is left.
//
// Options is one generic struct, taken as one value, rather than functional options or a
// variadic list to merge: KeyFunc, Transform and Indexers have the controller's object
// type, so a function of another type is a compile error, and what the type system
// cannot check (a nil ListerWatcher, a nil index function) is an error from New, before
// anything runs. The Options literal names the object type once, from which, with lw, Go
// infers New's type arguments, as above.
package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/queue"
	"github.com/typedinformer/typedinformer/reflect"
)

// ListerWatcher lists and watches objects of type T whose list type is L. Generated typed
// clients, the dynamic client and the metadata client satisfy it with no adapter.
type ListerWatcher[T event.Object, L reflect.List] = reflect.ListerWatcher[T, L]

// Controller keeps a typed, indexed cache of the objects a ListerWatcher returns and
// delivers their changes to handlers. Create it with New.
type Controller[T event.Object, L reflect.List] struct {
	cfg        config
	writer     *eventcache.Writer[T]
	collection *eventcache.EventQueueCollection[T]
	consumer   *eventcache.ResourceTrackingConsumer[T]
	reflector  *reflect.Reflector[T, L]
	dist       distributor[T]
	// detectMutations: the writer keeps snapshots, and Run checks them when it ends.
	detectMutations bool
	// onMutation is Options.OnMutation.
	onMutation func(context.Context, *eventcache.MutationError)
	// mutations holds the mutations found by writes, for Run to return, up to
	// maxKeptMutations; mutationsDropped counts those beyond. Guarded by mutMu.
	mutMu            sync.Mutex
	mutations        []error
	mutationsDropped int

	synced     atomic.Bool
	syncedCh   chan struct{}
	syncedOnce sync.Once

	mu      sync.Mutex
	started bool
	stopped bool
	runCtx  context.Context
	wg      sync.WaitGroup // handler goroutines
}

// New returns a Controller for lw with opts, ready to Run. Handlers may be added before
// or after Run starts.
//
// Mistakes in the arguments are errors here, not at Run: a nil (or typed-nil) lw
// (ErrNilArgument), a nil index function (eventcache.ErrNilIndexFunc), an index named
// eventcache.NamespaceIndex (eventcache.ErrIndexExists), and a reflect.Options.Metrics
// set on the embedded reflector options (ErrInvalidOptions). A typed-nil Clock or
// Metrics is none (reflect.New says so of the Clock).
func New[T event.Object, L reflect.List](lw ListerWatcher[T, L], opts Options[T]) (*Controller[T, L], error) {
	var zero T
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("controller of %T: %w", zero, err)
	}
	if guard.IsNil(lw) {
		return nil, fmt.Errorf("%w: the ListerWatcher of a controller of %T", ErrNilArgument, zero)
	}
	o := opts
	if o.Name == "" {
		o.Name = fmt.Sprintf("%T", zero)
	}
	if guard.IsNil(o.Metrics) {
		o.Metrics = nil
	}
	c := &Controller[T, L]{syncedCh: make(chan struct{})}
	c.cfg = config{name: o.Name, onError: o.OnError, metrics: guard.NewMetrics(o.Metrics, "controller", o.Name)}
	if o.FullHistory {
		c.cfg.compression = queue.FullHistory
	}
	c.writer = eventcache.NewWriter(o.Indexers)
	if o.DetectMutations || os.Getenv(MutationDetectorEnv) == "true" {
		c.writer.DetectMutations()
		c.detectMutations = true
		c.onMutation = o.OnMutation
	}
	eqOpts := eventcache.Options[T]{
		KeyFunc:     o.KeyFunc,
		Compression: c.cfg.compression,
		OnSynced:    c.onSynced,
	}
	if metrics := o.Metrics; metrics != nil {
		eqOpts.Depth = func(keys int) { metrics.EventQueueDepth(o.Name, keys) } // recovered by the queue
	}
	c.collection = eventcache.NewEventQueueCollection(c.writer.Store(), eqOpts)
	c.consumer = eventcache.NewResourceTrackingConsumer[T](c.writer, &c.dist, func(err error) {
		ctx := c.context()
		c.cfg.reportError(ctx, err)
		var m *eventcache.MutationError
		if c.detectMutations && errors.As(err, &m) {
			c.keepMutation(m)
			c.callOnMutation(ctx, m)
		}
	})
	// The reflector reports through the controller, which counts and logs for both.
	ropts := o.Options
	ropts.OnError = c.cfg.reportError
	ropts.Metrics = o.Metrics
	c.reflector = reflect.New(lw, eventcache.EventCache[T](c.collection), ropts)
	return c, nil
}

func (c *Controller[T, L]) context() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runCtx != nil {
		return c.runCtx
	}
	return context.Background()
}

// onSynced runs once, with nothing locked, on the drain loop, when the first list has been
// delivered to every handler's backlog, before anything more is. It seals each handler's
// initial state under c.mu, as AddHandler checks synced under c.mu, so that a handler
// being added meanwhile is sealed by one or the other.
func (c *Controller[T, L]) onSynced() {
	c.mu.Lock()
	c.synced.Store(true)
	runners := c.dist.all()
	c.mu.Unlock()
	c.syncedOnce.Do(func() { close(c.syncedCh) })
	for _, r := range runners {
		r.seal()
	}
}

// Run runs the controller until ctx is done: it starts the handlers and the consumer,
// then the reflector; when ctx ends it stops the reflector, then the consumer, then the
// handlers (letting an event being handled finish), and returns once none of its
// goroutines is left. It returns an error wrapping ErrAlreadyRunning if called twice, and
// one wrapping ErrNilArgument for a nil Controller (New's error unchecked). With
// Options.DetectMutations, it returns every cached object the detector found changed in
// place, each a *eventcache.MutationError, joined (errors.As finds the first): those
// found by writes while it ran, in the order found, then those its final check finds,
// in key order; nil when there are none.
func (c *Controller[T, L]) Run(ctx context.Context) error {
	if c == nil {
		var zero T
		return fmt.Errorf("%w: Run's Controller of %T", ErrNilArgument, zero)
	}
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return fmt.Errorf("controller %q: %w", c.cfg.name, ErrAlreadyRunning)
	}
	c.started = true
	c.runCtx = ctx
	for _, r := range c.dist.all() {
		c.startRunner(ctx, r)
	}
	c.mu.Unlock()

	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		_ = c.collection.Drain(ctx, c.consumer)
	}()
	c.reflector.Run(ctx)

	c.collection.Close()
	<-consumerDone
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	for _, r := range c.dist.all() {
		r.stop()
	}
	c.wg.Wait()
	if c.detectMutations {
		return c.checkMutations(ctx)
	}
	return nil
}

// maxKeptMutations bounds the mutations found by writes that Run keeps to return, for a
// test whose handler changes every object it is handed, on every event.
const maxKeptMutations = 1000

// keepMutation keeps m, found by a write, for Run to return.
func (c *Controller[T, L]) keepMutation(m *eventcache.MutationError) {
	c.mutMu.Lock()
	defer c.mutMu.Unlock()
	if len(c.mutations) < maxKeptMutations {
		c.mutations = append(c.mutations, m)
	} else {
		c.mutationsDropped++
	}
}

// checkMutations, at the end of Run, when the consumer and every handler have returned,
// checks every cached object (what differs now was changed by a handler or a reader, and
// will never be caught at an update), reports each mutation it finds as the writes'
// are, and returns them after those the writes found.
func (c *Controller[T, L]) checkMutations(ctx context.Context) error {
	var found []error
	if err := c.writer.CheckMutations(); err != nil {
		found = []error{err}
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			found = joined.Unwrap()
		}
	}
	for _, err := range found {
		c.cfg.reportError(ctx, err)
		var m *eventcache.MutationError
		if errors.As(err, &m) {
			c.callOnMutation(ctx, m)
		}
	}
	c.mutMu.Lock()
	errs := append(append([]error(nil), c.mutations...), found...)
	if c.mutationsDropped > 0 {
		errs = append(errs, fmt.Errorf("%d more cached objects found changed in place by writes (reported, not kept)", c.mutationsDropped))
	}
	c.mutMu.Unlock()
	return errors.Join(errs...)
}

// callOnMutation calls Options.OnMutation, if set, with nothing locked, and recovers and
// logs a panic in it: it runs on the consumer's goroutine and in Run.
func (c *Controller[T, L]) callOnMutation(ctx context.Context, m *eventcache.MutationError) {
	if c.onMutation == nil {
		return
	}
	defer guard.LogPanic(klog.FromContext(ctx), m, "OnMutation panicked", "controller", c.cfg.name, "key", m.Key)
	c.onMutation(ctx, m)
}

// startRunner starts r's goroutine. Called with c.mu held.
func (c *Controller[T, L]) startRunner(ctx context.Context, r *runner[T]) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		r.run(ctx)
	}()
}

// AddHandler registers h under name (used in logs, errors and metrics). The handler
// first receives every known object as a synchronization addition, then every later
// event. It can be called before or while the controller runs. It returns ErrNilHandler
// for a nil h, and ErrStopped once Run's context has ended (Run is stopping, or has
// returned): a handler added then would never sync.
//
// Handing over the current state takes time proportional to the number of known objects
// (copying references into the new handler's backlog, never calling a handler), during
// which the consumer pauses between two batches of keys, as client-go's AddEventHandler pauses its
// informer. Unlike client-go's, the reflector does not wait: what it records meanwhile is
// queued, and delivered after the copy.
func (c *Controller[T, L]) AddHandler(name string, h Handler[T]) (*Registration, error) {
	if guard.IsNil(h) {
		return nil, fmt.Errorf("%w: handler %q", ErrNilHandler, name)
	}
	r := newRunner(name, h, &c.cfg)
	var err error
	c.collection.Between(func() {
		store := c.writer.Store()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.stopped || (c.started && c.runCtx.Err() != nil) {
			// Once Run's context has ended, Run is stopping: a handler started now would
			// be stopped with the others, never synced.
			err = ErrStopped
			return
		}
		r.backlog.Update(func(pending queue.Pending[T]) {
			store.Range(func(key string, obj T) bool {
				pending.Push(event.Event[T]{Type: event.Added, Key: key, Object: obj, Sync: true})
				return true
			})
		})
		c.dist.add(r)
		if c.synced.Load() {
			r.seal()
		}
		if c.started {
			c.startRunner(c.runCtx, r)
		}
	})
	if err != nil {
		return nil, err
	}
	return &Registration{synced: r.synced, pending: r.pending, remove: func() {
		c.collection.Between(func() { c.dist.remove(r) })
		r.stop()
	}}, nil
}

// HasSynced reports whether every object of the first list has been applied to the known
// objects and handed to the handlers' backlogs. Each handler's own progress is its
// Registration's HasSynced. It has the signature client-go's cache.WaitForCacheSync takes.
func (c *Controller[T, L]) HasSynced() bool { return c.synced.Load() }

// Synced returns a channel that is closed once HasSynced is true.
func (c *Controller[T, L]) Synced() <-chan struct{} { return c.syncedCh }

// WaitForSync blocks until HasSynced is true (returning nil) or ctx is done (returning
// ctx.Err()).
//
// It means the initial list is in every handler's backlog, not that the handlers have
// handled it. A change that reaches a handler's backlog while that key's initial addition
// is still pending there merges into the addition (the handler never knew the object), so
// a handler ported from client-go that reacts only in UpdateFunc would not see it. To
// know that one handler has handled its initial state, wait on its
// Registration.WaitForSync.
func (c *Controller[T, L]) WaitForSync(ctx context.Context) error {
	select {
	case <-c.syncedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Store returns the read-only view of the known objects.
func (c *Controller[T, L]) Store() *eventcache.Store[T] { return c.writer.Store() }

// AddIndexers adds secondary indexes to the known objects, before or while the
// controller runs: the objects already known are indexed at once, atomically, and every
// later change keeps the new indexes up to date. A name already in use is an error
// wrapping eventcache.ErrIndexExists, and nothing is added (see Writer.AddIndexers).
// Sharing one controller between users that each need their own indexes is what it is
// for: Options.Indexers fixes the indexes at creation.
func (c *Controller[T, L]) AddIndexers(indexers eventcache.Indexers[T]) error {
	return c.writer.AddIndexers(indexers)
}

// LastSyncResourceVersion returns the newest resource version the controller has seen.
func (c *Controller[T, L]) LastSyncResourceVersion() string {
	return c.reflector.LastSyncResourceVersion()
}
