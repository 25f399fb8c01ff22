package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/typedinformer/typedinformer/typed/predicate"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// ErrOtherShard is reported, wrapped, when a Related mapping sharded by namespace maps an
// object to a key in another shard than the object's.
var ErrOtherShard = errors.New("related object mapped to a key of another shard")

// Loop reconciles the keys of the shards this replica holds: for each shard, while the
// Sharder gives it, a cache of that shard's objects only (the API server filters them,
// see Filter) and a typed.Loop over it.
//
// In DESIGN terms, a shard's cache is a controller of its own: gaining a shard acquires
// it, and its initial list reconciles every key of the shard (at the initial list's
// priority, below live changes); losing a shard stops its typed.Loop, which finishes its
// in-flight reconciles and drops the keys still queued without reconciling them, but
// for deletions, which it reconciles while it still holds the shard's Lease (the next
// owner's list cannot show them; see typed.Loop.RunHandingOver and Shard.Held), and
// then releases its cache. Objects that leave this replica's scope that way are not
// deleted: no event reports them, and no deletion is reconciled for them. An object
// never leaves a shard by itself, as its UID and namespace never change.
//
// The caches are the Manager's shared caches (DESIGN 16): a shard's cache is shared with
// every other cache of the same shard's objects in the process (another Loop of the kind
// on the same Sharder), and a Related cache of all objects (ByUID) with the Manager's own
// cache of them. They run while the Manager runs: run the Loop under it (Manager.Add),
// or beside Manager.Run.
//
// Options.Workers bounds the reconciles running at once on this replica, across all its
// shards. A live change waits for the reconciles running and for those already waiting
// for a worker, at most one per worker of each shard held.
type Loop[T event.Object] struct {
	m       *manager.Manager
	sharder *Sharder
	// acquire acquires the cache of the objects of the Loop's Source in one shard, as
	// opts select them; nil for a Source without a ListerWatcher.
	acquire func(sh Shard, opts []manager.CacheOptions[T]) (*manager.Cache[T], error)
	r       typed.Reconciler[T]
	opts    typed.Options
	preds   []predicate.Predicate[T]
	copts   []manager.CacheOptions[T]
	workers chan struct{}

	// related add the Related sources to each shard's loop.
	related []relatedSource[T]
	// errs are the mistakes of Related calls, returned by Run.
	errs []error

	mu     sync.Mutex
	shards map[int]*manager.Cache[T]
}

// relatedSource relates a Related source to the loop of shard sh, whose primary cache is
// primary. It returns what to call once the shard's loop has returned.
type relatedSource[T event.Object] func(ctx context.Context, sh Shard, loop *typed.Loop[T], primary *manager.Cache[T]) (release func())

// NewLoop returns a Loop that reconciles, with r, the objects of src in the shards s gives
// this replica, cached by m (which must run for the caches to). opts and preds are those
// of typed.NewLoop, except that Options.Workers counts the reconciles of the whole
// replica. Both type arguments of src are inferred:
//
//	loop := shard.NewLoop(m, sharder, manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps), r, typed.Options{})
func NewLoop[T event.Object, L reflect.List](m *manager.Manager, s *Sharder, src manager.Source[T, L], r typed.Reconciler[T], opts typed.Options, preds ...predicate.Predicate[T]) *Loop[T] {
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.Name == "" {
		var zero T
		opts.Name = fmt.Sprintf("%T", zero)
	}
	if guard.IsNil(opts.Metrics) {
		opts.Metrics = nil // typed-nil: none, as typed.NewLoop reads it, not a wrapper around nil
	}
	l := &Loop[T]{m: m, sharder: s, r: r, opts: opts, preds: preds, workers: make(chan struct{}, opts.Workers)}
	if src.ListerWatcher != nil {
		l.acquire = func(sh Shard, opts []manager.CacheOptions[T]) (*manager.Cache[T], error) {
			in, err := inShard(src, sh)
			if err != nil {
				return nil, err
			}
			return manager.Acquire(m, in, opts...)
		}
	}
	return l
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

// Cached returns the number of objects cached for each shard this replica works on.
func (l *Loop[T]) Cached() map[int]int {
	if l == nil {
		return map[int]int{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int]int, len(l.shards))
	for i, c := range l.shards {
		out[i] = c.Len()
	}
	return out
}

// Get returns the cached object of key if this replica holds its shard.
func (l *Loop[T]) Get(key string) (T, bool) {
	var shards map[int]*manager.Cache[T]
	if l != nil {
		l.mu.Lock()
		shards = maps.Clone(l.shards)
		l.mu.Unlock()
	}
	for _, c := range shards {
		if obj, ok := c.Get(key); ok {
			return obj, true
		}
	}
	var zero T
	return zero, false
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

// check returns the mistakes in l's arguments, which Run and RunShard refuse to run with.
func (l *Loop[T]) check() error {
	switch {
	case l == nil:
		return fmt.Errorf("%w: a nil Loop", controller.ErrNilArgument)
	case l.m == nil:
		return fmt.Errorf("%w: the Loop's manager", controller.ErrNilArgument)
	case l.sharder == nil:
		return fmt.Errorf("%w: the Loop's sharder", controller.ErrNilArgument)
	case l.acquire == nil:
		return fmt.Errorf("%w: the ListerWatcher of the Loop's Source", controller.ErrNilArgument)
	case guard.IsNil(l.r):
		return fmt.Errorf("%w: the Loop's reconciler", controller.ErrNilArgument)
	case len(l.errs) > 0:
		return errors.Join(l.errs...)
	}
	for i, p := range l.preds {
		if p == nil {
			return fmt.Errorf("%w: the Loop's predicate %d", controller.ErrNilArgument, i)
		}
	}
	return nil
}

// RunShard reconciles the keys of sh until ctx ends, then lets its in-flight reconciles
// finish and releases its cache. Run calls it for each shard held; call it yourself to
// run several loops on the shards of one Sharder:
//
//	sharder.Run(ctx, func(ctx context.Context, sh shard.Shard) {
//		var wg sync.WaitGroup
//		wg.Go(func() { websites.RunShard(ctx, sh) })
//		wg.Go(func() { databases.RunShard(ctx, sh) })
//		wg.Wait()
//	})
//
// The mistakes Run returns as errors (a nil Manager, Sharder, ListerWatcher, reconciler
// or predicate, a Related call's) make RunShard report them (Options.OnError, or the log)
// and return at once, as does a cache it cannot acquire (the Manager stopped).
func (l *Loop[T]) RunShard(ctx context.Context, sh Shard) {
	if err := l.check(); err != nil {
		if l == nil {
			klog.FromContext(ctx).Error(err, "sharded loop not run", "shard", sh.Index)
			return
		}
		l.report(ctx, "", err)
		return
	}
	c, err := l.acquire(sh, l.copts)
	if err != nil {
		l.report(ctx, "", fmt.Errorf("shard %d: %w", sh.Index, err))
		return
	}
	// Released once the loop has returned: it reads the cache until its in-flight
	// reconciles end. The cache stops if this was its last handle.
	defer func() { <-c.Release() }()
	name := fmt.Sprintf("%s/shard-%d", l.opts.Name, sh.Index)
	opts := l.opts
	opts.Name = name
	opts.Metrics = l.metrics(sh.Index)
	loop := typed.NewLoop[T](c, typed.ReconcilerFunc[T](func(ctx context.Context, req typed.Request[T]) (typed.Result, error) {
		// A key whose shard is given up while it waits for a worker was not reconciled:
		// ctx's error says so to the Loop, which then drops a live key but keeps a
		// deletion's last state, to reconcile it before the Lease is released.
		select {
		case l.workers <- struct{}{}:
		case <-ctx.Done():
			return typed.Result{}, ctx.Err()
		}
		defer func() { <-l.workers }()
		if err := ctx.Err(); err != nil {
			return typed.Result{}, err // select picked the worker although ctx had ended too
		}
		sh.Ready()
		return l.r.Reconcile(ctx, req)
	}), opts, l.preds...)

	for _, add := range l.related {
		if release := add(ctx, sh, loop, c); release != nil {
			defer release()
		}
	}
	l.mu.Lock()
	if l.shards == nil {
		l.shards = map[int]*manager.Cache[T]{}
	}
	l.shards[sh.Index] = c
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.shards, sh.Index)
		l.mu.Unlock()
	}()
	// The watch ends with the loop, which may return before ctx ends (an error): the
	// shard's Lease is then released, and held again only by a later campaign.
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wg.Go(func() { l.watchShard(wctx, sh, c) })
	// The shard's next owner lists it, and reconciles every live key; the deletions
	// queued here are reconciled before the Lease is released.
	if err := loop.RunHandingOver(ctx, sh.Held()); err != nil {
		l.report(ctx, "", err)
	}
}

// watchShard reports the shard's cached objects every RetryPeriod, and marks the shard
// ready once its cache has synced empty: no reconcile will say it. A cache that has not
// synced within two lease durations is logged, with why (Cache.Err).
func (l *Loop[T]) watchShard(ctx context.Context, sh Shard, c *manager.Cache[T]) {
	// A shard whose cache does not sync reconciles nothing; say why at the default level,
	// once: most often its Manager does not run (manager.ErrNotStarted).
	bound := 2 * l.sharder.opts.LeaseDuration
	wctx, cancel := context.WithTimeout(ctx, bound)
	err := c.WaitForSync(wctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Info("A shard's cache has not synced; the shard reconciles nothing until it does",
			"loop", l.opts.Name, "shard", sh.Index, "after", bound, "why", c.Err())
		err = c.WaitForSync(ctx)
	}
	if err != nil {
		return
	}
	if c.Len() == 0 {
		sh.Ready()
	}
	m := l.sharder.opts.Metrics
	if m == nil {
		return
	}
	t := time.NewTicker(l.sharder.opts.RetryPeriod)
	defer t.Stop()
	for {
		m.ShardObjects(l.sharder.opts.Name, sh.Index, c.Len())
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

// metrics gives a shard's loop the replica's loop metrics, and its queue depth to the
// Sharder's metrics as the shard's keys.
func (l *Loop[T]) metrics(shard int) typed.Metrics {
	if l.opts.Metrics == nil && l.sharder.opts.Metrics == nil {
		return nil
	}
	return shardMetrics{loop: l.opts.Metrics, sharder: l.sharder.opts.Metrics, group: l.sharder.opts.Name, shard: shard}
}

type shardMetrics struct {
	loop    typed.Metrics
	sharder Metrics
	group   string
	shard   int
}

func (m shardMetrics) QueueDepth(loop string, depth int) {
	if m.loop != nil {
		m.loop.QueueDepth(loop, depth)
	}
	if m.sharder != nil {
		m.sharder.ShardKeys(m.group, m.shard, depth)
	}
}

func (m shardMetrics) Retry(loop string) {
	if m.loop != nil {
		m.loop.Retry(loop)
	}
}

func (m shardMetrics) ReconcileLatency(loop string, d time.Duration) {
	if m.loop != nil {
		m.loop.ReconcileLatency(loop, d)
	}
}

func (m shardMetrics) ReconcileError(loop string, terminal bool) {
	if m.loop != nil {
		m.loop.ReconcileError(loop, terminal)
	}
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
	byNamespace := l.sharder != nil && l.sharder.opts.Space.By == ByNamespace
	l.related = append(l.related, func(ctx context.Context, sh Shard, loop *typed.Loop[T], primary *manager.Cache[T]) func() {
		// The Loop's namespaces as they are when the shard runs: WithCacheOptions may
		// come after Related.
		var opts manager.CacheOptions[S]
		if !src.ClusterScoped {
			opts.Namespaces = l.namespaces()
		}
		var c *manager.Cache[S]
		var err error
		if byNamespace {
			var in manager.Source[S, SL]
			if in, err = inShard(src, sh); err == nil {
				c, err = manager.Acquire(l.m, in, opts)
			}
		} else {
			c, err = manager.Acquire(l.m, src, opts)
		}
		if err != nil {
			l.report(ctx, "", fmt.Errorf("%s, shard %d: %w", name, sh.Index, err))
			return nil
		}
		mapping := func(obj S) []string {
			keys := keysOf(obj)
			held := keys[:0:0]
			for _, k := range keys {
				if !byNamespace {
					// Another shard's key: its own shard's loop reconciles it.
					if _, ok := primary.Get(k); ok {
						held = append(held, k)
					}
					continue
				}
				// The key's object, if any, is cached by its own namespace's shard; here it
				// would look deleted.
				if ns, _ := event.SplitKey(k); sh.Space.OfHash(Hash(ns)) != sh.Index {
					l.report(ctx, k, fmt.Errorf("%w: %s/%s maps to %s, of shard %d; %s is in shard %d",
						ErrOtherShard, obj.GetNamespace(), obj.GetName(), k, sh.Space.OfHash(Hash(ns)), obj.GetNamespace(), sh.Index))
					continue
				}
				held = append(held, k)
			}
			return held
		}
		if err := typed.Related(loop, c, mapping, preds...); err != nil {
			l.report(ctx, "", err)
		}
		return func() { <-c.Release() }
	})
	return nil
}
