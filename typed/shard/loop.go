package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/typed/predicate"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// Loop reconciles the keys of the shards this replica holds: for each shard, while the
// Sharder gives it, a cache of that shard's objects only (the API server filters them,
// see Filter), all read by one typed.Loop, with one queue and Options.Workers workers
// for the whole replica.
//
// In DESIGN terms, gaining a shard acquires its cache, and once the shard's caches have
// synced its keys join the Loop: its initial list reconciles every key of the shard (at
// the initial list's priority, below live changes). Losing a shard ends the context of
// its reconciles in flight and drops its keys still queued without reconciling them,
// but for deletions, which the Loop reconciles while this replica still holds the
// shard's Lease (the next owner's list cannot show them; see typed.Loop.HandOver and
// Shard.Held); then the shard's cache is released. Objects that leave this replica's
// scope that way are not deleted: no event reports them, and no deletion is reconciled
// for them. An object never leaves a shard by itself, as its UID and namespace never
// change. The typed.Loop runs while at least one shard is worked on.
//
// The caches are the Manager's shared caches (DESIGN 16): a shard's cache is shared with
// every other cache of the same shard's objects in the process (another Loop of the kind
// on the same Sharder), and a Related cache of all objects (ByUID) with the Manager's own
// cache of them. They run while the Manager runs: run the Loop under it (Manager.Add),
// or beside Manager.Run.
//
// Options.Workers bounds the reconciles running at once on this replica, across all its
// shards, and a live change waits for at most the reconciles running, one per worker,
// whatever the shards held (see typed.Loop).
type Loop[T event.Object] struct {
	m       *manager.Manager
	sharder *Sharder
	// acquire acquires the cache of the objects of the Loop's Source in one shard, as
	// opts select them.
	acquire func(sh Shard, opts []manager.CacheOptions[T]) (*manager.Cache[T], error)
	r       typed.Reconciler[T]
	opts    typed.Options
	copts   []manager.CacheOptions[T]

	// primary holds the caches of the shards whose keys the Loop reconciles, and loop
	// reads them (through view).
	primary *parts[T]
	loop    *typed.Loop[T]
	// related acquire, for a shard, the caches of the Related sources sharded by
	// namespace, and return what joins and what releases them.
	related []relatedSource
	// errs are the mistakes of Related calls, returned by Run.
	errs []error

	mu sync.Mutex
	// held maps each shard whose keys are reconciled to its reconciles' context.
	held map[int]context.Context
	// users counts the shards worked on; the typed.Loop runs while it is positive, until
	// stop is called and done closed.
	users int
	stop  context.CancelFunc
	done  chan struct{}
}

// relatedSource acquires a Related source's cache of shard sh's objects. It returns
// what joins it to the Loop once it has synced, and what releases it.
type relatedSource func(ctx context.Context, sh Shard) (c shardCache, join func() error, release func(), err error)

// shardCache is what RunShard uses of a shard's cache: it waits for it to sync, then to
// hold its previous holder's last writes.
type shardCache interface {
	WaitForSync(ctx context.Context) error
	typed.Fencer
}

// shardKey is the key of the Shard in the context of its reconciles.
type shardKey struct{}

// NewLoop returns a Loop that reconciles, with r, the objects of src in the shards s gives
// this replica, cached by m (which must run for the caches to). opts and preds are those
// of typed.NewLoop. Both type arguments of src are inferred:
//
//	loop, err := shard.NewLoop(m, sharder, manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps), r, typed.Options{})
//
// Mistakes in the arguments are errors here, not at Run: a nil m or s, a src without a
// ListerWatcher, a nil (or typed-nil) r and a nil predicate are errors wrapping
// controller.ErrNilArgument that name the argument. A ListerWatcher that gives a typed
// nil is found when a shard's cache is acquired, and reported then.
func NewLoop[T event.Object, L reflect.List](m *manager.Manager, s *Sharder, src manager.Source[T, L], r typed.Reconciler[T], opts typed.Options, preds ...predicate.Predicate[T]) (*Loop[T], error) {
	var zero T
	switch {
	case m == nil:
		return nil, fmt.Errorf("%w: NewLoop's manager, for %T", controller.ErrNilArgument, zero)
	case s == nil:
		return nil, fmt.Errorf("%w: NewLoop's sharder, for %T", controller.ErrNilArgument, zero)
	case src.ListerWatcher == nil:
		return nil, fmt.Errorf("%w: the ListerWatcher of NewLoop's source of %T", controller.ErrNilArgument, zero)
	case guard.IsNil(r):
		return nil, fmt.Errorf("%w: NewLoop's reconciler of %T", controller.ErrNilArgument, zero)
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("%T", zero)
	}
	l := &Loop[T]{m: m, sharder: s, r: r, opts: opts, primary: newParts[T]()}
	l.acquire = func(sh Shard, opts []manager.CacheOptions[T]) (*manager.Cache[T], error) {
		in, err := inShard(src, sh)
		if err != nil {
			return nil, err
		}
		return manager.Acquire(m, in, opts...)
	}
	// typed.NewLoop refuses a nil predicate; the source and reconciler it is given are
	// never nil.
	loop, err := typed.NewLoop[T](view[T]{l}, typed.ReconcilerFunc[T](func(ctx context.Context, req typed.Request[T]) (typed.Result, error) {
		if sh, ok := ctx.Value(shardKey{}).(Shard); ok {
			sh.Ready()
		}
		return l.r.Reconcile(ctx, req)
	}), opts, preds...)
	if err != nil {
		return nil, err
	}
	l.loop = loop
	return l, nil
}

// view is the Loop's shards read as one typed.Source, whose parts are the shards.
type view[T event.Object] struct{ l *Loop[T] }

func (v view[T]) AddHandler(name string, h controller.Handler[T]) (*controller.Registration, error) {
	return v.l.primary.AddHandler(name, h)
}

func (v view[T]) Get(key string) (T, bool) { return v.l.primary.Get(key) }

// Watermarks and Fence make the view typed.Consistent: see parts.
func (v view[T]) Watermarks(namespace string) []eventcache.Watermarked {
	return v.l.primary.Watermarks(namespace)
}

func (v view[T]) Fence(ctx context.Context) error { return v.l.primary.Fence(ctx) }

// Part returns the context of the reconciles of key's shard while this replica works on
// it.
func (v view[T]) Part(key string, obj T) (context.Context, bool) {
	i, ok := v.l.shardOf(key, obj)
	if !ok {
		return nil, false
	}
	v.l.mu.Lock()
	defer v.l.mu.Unlock()
	part, held := v.l.held[i]
	return part, held
}

// shardOf returns the shard of key, whose object is obj (the zero T when unknown):
// known from the key alone when sharding by namespace, from obj's UID otherwise.
func (l *Loop[T]) shardOf(key string, obj T) (int, bool) {
	space := l.sharder.opts.Space
	if space.By == ByNamespace {
		ns, _ := event.SplitKey(key)
		return space.OfHash(Hash(ns)), true
	}
	var zero T
	if obj == zero {
		return 0, false
	}
	return space.OfHash(Hash(string(obj.GetUID()))), true
}

// inShard returns the Source of src's objects in shard sh: its ListerWatchers are
// Filter's, and its Subset is the shard's selector, so that the caches of one shard are
// shared and those of two never are. With a single shard it selects every object, and
// shares the caches of src itself.
func inShard[T event.Object, L reflect.List](src manager.Source[T, L], sh Shard) (manager.Source[T, L], error) {
	if _, err := Filter[T, L](nil, sh.Space, []int{sh.Index}); err != nil {
		return src, err // checks the shard; the ListerWatchers are filtered per namespace below
	}
	in := src
	in.Subset = sh.Selector()
	in.ListerWatcher = func(namespace string) controller.ListerWatcher[T, L] {
		f, err := Filter[T, L](src.ListerWatcher(namespace), sh.Space, []int{sh.Index})
		if err != nil || f == nil {
			return nil // Acquire reports a missing ListerWatcher; the shard was checked above
		}
		return f
	}
	return in, nil
}

// WithCacheOptions sets the options of each shard's cache (see manager.Acquire): its
// namespaces, selectors, a Transform, indexes. Related caches of namespaced kinds get
// the same namespaces. It returns l.
func (l *Loop[T]) WithCacheOptions(opts ...manager.CacheOptions[T]) *Loop[T] {
	l.copts = slices.Clone(opts)
	return l
}

// namespaces returns the namespaces the shards' caches are scoped to, nil for all.
func (l *Loop[T]) namespaces() []string {
	var ns []string
	for _, o := range l.copts {
		if len(o.Namespaces) > 0 {
			ns = o.Namespaces
		}
	}
	return ns
}

// Cached returns the number of objects cached for each shard whose keys this replica
// reconciles.
func (l *Loop[T]) Cached() map[int]int {
	if l == nil {
		return map[int]int{}
	}
	return l.primary.lens()
}

// Get returns the cached object of key if this replica holds its shard.
func (l *Loop[T]) Get(key string) (T, bool) {
	if l == nil {
		var zero T
		return zero, false
	}
	return l.primary.Get(key)
}

// NeedLeaderElection returns false: every replica runs the Loop, and they divide the
// shards among them, so that a manager.Manager runs it on every replica, leading or not.
func (l *Loop[T]) NeedLeaderElection() bool { return false }

// Run divides the shards with the other replicas through the Sharder and reconciles the
// keys of those held, until ctx ends; see Sharder.Run.
func (l *Loop[T]) Run(ctx context.Context) error {
	if err := l.check(); err != nil {
		return err
	}
	return l.sharder.Run(ctx, l.RunShard)
}

// check returns what Run and RunShard refuse to run with: a nil Loop or one not made by
// NewLoop (whose error went unchecked), and the mistakes of Related calls.
func (l *Loop[T]) check() error {
	switch {
	case l == nil || l.loop == nil:
		var zero T
		return fmt.Errorf("%w: a nil Loop of %T, or one not made by NewLoop", controller.ErrNilArgument, zero)
	case len(l.errs) > 0:
		return errors.Join(l.errs...)
	}
	return nil
}

// RunShard reconciles the keys of sh until ctx ends, then hands the shard over (its
// reconciles in flight finish, and its deletions are reconciled while sh.Held lasts)
// and releases its caches. Run calls it for each shard held; call it yourself to run
// several loops on the shards of one Sharder:
//
//	sharder.Run(ctx, func(ctx context.Context, sh shard.Shard) {
//		var wg sync.WaitGroup
//		wg.Go(func() { websites.RunShard(ctx, sh) })
//		wg.Go(func() { databases.RunShard(ctx, sh) })
//		wg.Wait()
//	})
//
// The mistakes Run returns as errors (a nil Loop or one not made by NewLoop, a Related
// call's) make RunShard report them (Options.OnError, or the log) and return at once, as
// does a cache it cannot acquire (the Manager stopped).
func (l *Loop[T]) RunShard(ctx context.Context, sh Shard) {
	if err := l.check(); err != nil {
		if l == nil {
			klog.FromContext(ctx).Error(err, "sharded loop not run", "shard", sh.Index)
			return
		}
		l.report(ctx, "", err)
		return
	}
	loopDone := l.start(ctx)
	defer l.end()
	c, err := l.acquire(sh, l.copts)
	if err != nil {
		l.report(ctx, "", fmt.Errorf("shard %d: %w", sh.Index, err))
		return
	}
	// Released once the shard is handed over: the Loop reads the cache until then. The
	// cache stops if this was its last handle.
	defer func() { <-c.Release() }()
	caches := []shardCache{c}
	var joins []func() error
	for _, acquire := range l.related {
		rc, join, release, err := acquire(ctx, sh)
		if err != nil {
			l.report(ctx, "", err)
			continue
		}
		defer release()
		caches = append(caches, rc)
		joins = append(joins, join)
	}
	if !l.synced(ctx, sh, c, caches) {
		return
	}
	// Its previous holder's last writes are in its caches before any key is reconciled.
	fencers := make([]typed.Fencer, len(caches))
	for i, rc := range caches {
		fencers[i] = rc
	}
	if !l.loop.Fence(ctx, fencers...) {
		return
	}

	// The shard's keys join the Loop: its reconciles run under part, which ends with ctx.
	part := context.WithValue(ctx, shardKey{}, sh)
	l.mu.Lock()
	if l.held == nil {
		l.held = map[int]context.Context{}
	}
	l.held[sh.Index] = part
	l.mu.Unlock()
	// The primary first: a related event read before would find its key's object
	// missing, and reconcile it as deleted.
	for _, join := range append([]func() error{func() error { return l.primary.join(sh.Index, c) }}, joins...) {
		if err := join(); err != nil {
			l.report(ctx, "", fmt.Errorf("shard %d: %w", sh.Index, err))
		}
	}
	if c.Len() == 0 {
		sh.Ready() // no reconcile will say it
	}
	select {
	case <-ctx.Done():
	case <-loopDone: // the Loop failed, and reported why
	}

	// Handed over: the next owner lists the shard and reconciles every live key; the
	// deletions the Loop holds are reconciled before the Lease is released.
	mine := func(key string, last T) bool {
		i, ok := l.shardOf(key, last)
		return ok && i == sh.Index
	}
	if err := l.loop.HandOver(part, sh.Held(), mine); err != nil {
		l.report(ctx, "", err)
	}
	l.primary.leave(sh.Index)
	l.mu.Lock()
	delete(l.held, sh.Index)
	l.mu.Unlock()
	l.loop.Forget(mine)
}

// start makes the typed.Loop run, if it does not yet, for a shard worked on until end is
// called; it returns a channel closed when that run of the Loop ends.
func (l *Loop[T]) start(ctx context.Context) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.users++
	if l.users > 1 {
		return l.done
	}
	prev := l.done
	// The Loop outlives the shard that starts it; its logger is that shard's.
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	l.stop, l.done = stop, done
	go func() {
		defer close(done)
		if prev != nil {
			<-prev // a run stopping as this one starts
		}
		rctx, stopReports := context.WithCancel(lctx)
		var wg sync.WaitGroup
		wg.Go(func() { l.reportShards(rctx) })
		if err := l.loop.Run(lctx); err != nil {
			l.report(lctx, "", err)
		}
		stopReports()
		wg.Wait()
	}()
	return done
}

// end stops the typed.Loop, and waits for it, when the last shard worked on ends.
func (l *Loop[T]) end() {
	l.mu.Lock()
	l.users--
	if l.users > 0 {
		l.mu.Unlock()
		return
	}
	stop, done := l.stop, l.done
	l.mu.Unlock()
	stop()
	<-done
}

// synced waits until every cache of shard sh has synced, and reports false when ctx
// ends first. A cache that has not synced within two lease durations is logged, with
// why (Cache.Err): most often its Manager does not run (manager.ErrNotStarted).
func (l *Loop[T]) synced(ctx context.Context, sh Shard, c *manager.Cache[T], caches []shardCache) bool {
	bound := 2 * l.sharder.opts.LeaseDuration
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for _, rc := range caches {
		if rc.WaitForSync(wctx) == nil {
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		klog.FromContext(ctx).Info("A shard's cache has not synced; the shard reconciles nothing until it does",
			"loop", l.opts.Name, "shard", sh.Index, "after", bound, "why", c.Err())
		wctx = ctx
		if rc.WaitForSync(ctx) != nil {
			return false
		}
	}
	return true
}

// reportShards reports, every RetryPeriod while the Loop runs, each shard's cached
// objects and queued keys to the Sharder's Metrics. One walk of the Loop's queue, copied
// out of its lock, counts the keys of every shard.
func (l *Loop[T]) reportShards(ctx context.Context) {
	if !l.sharder.metrics.Set() {
		return
	}
	t := time.NewTicker(l.sharder.opts.RetryPeriod)
	defer t.Stop()
	for {
		queued := map[int]int{}
		for _, key := range l.loop.QueuedKeys() {
			var obj T
			if l.sharder.opts.Space.By != ByNamespace {
				obj, _ = l.primary.Get(key) // a UID's shard; a namespace's needs no object
			}
			if i, ok := l.shardOf(key, obj); ok {
				queued[i]++
			}
		}
		for i, n := range l.primary.lens() {
			l.sharder.metrics.Call(ctx, "ShardObjects", func(m Metrics) { m.ShardObjects(l.sharder.opts.Name, i, n) })
			l.sharder.metrics.Call(ctx, "ShardKeys", func(m Metrics) { m.ShardKeys(l.sharder.opts.Name, i, queued[i]) })
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// report hands err, about key (or none), to Options.OnError, or logs it.
func (l *Loop[T]) report(ctx context.Context, key string, err error) {
	if l.opts.OnError != nil {
		l.opts.OnError(ctx, key, err)
		return
	}
	klog.FromContext(ctx).Error(err, "sharded loop", "loop", l.opts.Name, "key", key)
}

// Related makes every event of src's objects reconcile the keys keysOf maps them to, as
// typed.Related does, in the shard that holds each key; call it before Run. The related
// caches are the Manager's, scoped to the Loop's namespaces (WithCacheOptions) for a
// namespaced src; Go infers every type argument.
//
// With ByNamespace, each shard held gets a cache of src's objects in that shard too,
// filtered by the server as the primary's is: a namespaced object lies in its
// namespace's shard, with the primary objects it relates to. keysOf must then map an
// object to keys of its own namespace's shard (a namespaced kind, mapped within its
// namespace): a key of another shard is not reconciled for that object, as its shard's
// replica never sees it, and is reported wrapping ErrOtherShard. With ByUID, an object's
// UID says nothing of the shard of the keys it maps to, so one cache of all of src's
// objects, shared by the shards of the replica (and with every other user of that cache
// in the process), feeds every shard's loop, and a shard reconciles only the keys whose
// objects its own cache holds; the others belong to other shards, whose loops reconcile
// them.
//
// It returns an error wrapping controller.ErrNilArgument for a nil l, ListerWatcher, keysOf or
// predicate, and relates nothing then; Run returns the same error, so that an unchecked
// mistake still stops the Loop.
func Related[S event.Object, SL reflect.List, T event.Object](l *Loop[T], src manager.Source[S, SL], keysOf func(S) []string, preds ...predicate.Predicate[S]) error {
	var zero S
	if l == nil {
		return fmt.Errorf("%w: Related's Loop, for %T", controller.ErrNilArgument, zero)
	}
	name := fmt.Sprintf("%s/related-%T", l.opts.Name, zero)
	fail := func(err error) error {
		l.errs = append(l.errs, err)
		return err
	}
	switch {
	case src.ListerWatcher == nil:
		return fail(fmt.Errorf("%w: the ListerWatcher of %s", controller.ErrNilArgument, name))
	case keysOf == nil:
		return fail(fmt.Errorf("%w: the mapping of %s", controller.ErrNilArgument, name))
	}
	for i, p := range preds {
		if p == nil {
			return fail(fmt.Errorf("%w: predicate %d of %s", controller.ErrNilArgument, i, name))
		}
	}
	// The Loop's namespaces as they are when the cache is acquired: WithCacheOptions may
	// come after Related.
	cacheOptions := func() manager.CacheOptions[S] {
		var opts manager.CacheOptions[S]
		if !src.ClusterScoped {
			opts.Namespaces = l.namespaces()
		}
		return opts
	}
	if l.sharder == nil || l.sharder.opts.Space.By != ByNamespace {
		// One cache of all of src's objects while the Loop runs; a key whose object no
		// shard held here caches is dropped by the Loop (see view.Part).
		if err := typed.Related(l.loop, &whole[S, SL]{m: l.m, src: src, opts: cacheOptions}, keysOf, preds...); err != nil {
			return fail(err)
		}
		return nil
	}
	space := l.sharder.opts.Space
	shards := newParts[S]()
	l.related = append(l.related, func(ctx context.Context, sh Shard) (shardCache, func() error, func(), error) {
		in, err := inShard(src, sh)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s, shard %d: %w", name, sh.Index, err)
		}
		c, err := manager.Acquire(l.m, in, cacheOptions())
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s, shard %d: %w", name, sh.Index, err)
		}
		return c, func() error { return shards.join(sh.Index, c) }, func() {
			shards.leave(sh.Index)
			<-c.Release()
		}, nil
	})
	err := typed.Related(l.loop, shards, func(obj S) []string {
		keys := keysOf(obj)
		held := keys[:0:0]
		for _, k := range keys {
			// The key's object, if any, is cached by its own namespace's shard, whose
			// replica never sees obj.
			if ns, _ := event.SplitKey(k); space.OfHash(Hash(ns)) != space.OfHash(Hash(obj.GetNamespace())) {
				l.report(context.Background(), k, fmt.Errorf("%w: %s/%s maps to %s, of shard %d; %s is in shard %d",
					ErrOtherShard, obj.GetNamespace(), obj.GetName(), k, space.OfHash(Hash(ns)), obj.GetNamespace(), space.OfHash(Hash(obj.GetNamespace()))))
				continue
			}
			held = append(held, k)
		}
		return held
	}, preds...)
	if err != nil {
		return fail(err)
	}
	return nil
}

// whole is a source of all of src's objects, whose cache is acquired from m when a
// handler is added and released with the handler's Registration.
type whole[S event.Object, SL reflect.List] struct {
	m    *manager.Manager
	src  manager.Source[S, SL]
	opts func() manager.CacheOptions[S]

	mu sync.Mutex
	c  *manager.Cache[S]
}

func (w *whole[S, SL]) AddHandler(name string, h controller.Handler[S]) (*controller.Registration, error) {
	c, err := manager.Acquire(w.m, w.src, w.opts())
	if err != nil {
		return nil, err
	}
	reg, err := c.AddHandler(name, h)
	if err != nil {
		<-c.Release()
		return nil, err
	}
	w.mu.Lock()
	w.c = c
	w.mu.Unlock()
	return controller.Join([]*controller.Registration{reg}, func() {
		w.mu.Lock()
		if w.c == c {
			w.c = nil
		}
		w.mu.Unlock()
		<-c.Release()
	}), nil
}

func (w *whole[S, SL]) Get(key string) (S, bool) {
	w.mu.Lock()
	c := w.c
	w.mu.Unlock()
	if c == nil {
		var zero S
		return zero, false
	}
	return c.Get(key)
}
