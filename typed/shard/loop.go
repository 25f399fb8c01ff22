package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
)

// ErrOtherShard is reported, wrapped, when a Related mapping sharded by namespace maps an
// object to a key in another shard than the object's.
var ErrOtherShard = errors.New("related object mapped to a key of another shard")

// Loop reconciles the keys of the shards this replica holds: for each shard, while the
// Sharder gives it, a cache of that shard's objects only (the API server filters them,
// see Filter) and a typed.Loop over it.
//
// In DESIGN terms, a shard's cache is a controller of its own: gaining a shard starts
// one, whose initial list reconciles every key of the shard (at the initial list's
// priority, below live changes); losing a shard stops its typed.Loop, which finishes its
// in-flight reconciles and drops the keys still queued without reconciling them, but
// for deletions, which it reconciles while it still holds the shard's Lease (the next
// owner's list cannot show them; see typed.Loop.RunHandingOver and Shard.Held), and
// then stops its cache. Objects that leave this replica's scope that way are not
// deleted: no event reports them, and no deletion is reconciled for them. An object
// never leaves a shard by itself, as its UID and namespace never change.
//
// The caches of a Loop are its own, not a manager's shared caches (DESIGN 16): a shard's
// selector makes each a scope no unsharded cache has. Two Loops of one kind on one
// Sharder would cache it twice; follow other kinds with Related instead.
//
// Options.Workers bounds the reconciles running at once on this replica, across all its
// shards. A live change waits for the reconciles running and for those already waiting
// for a worker, at most one per worker of each shard held.
type Loop[T event.Object, L reflect.List] struct {
	sharder *Sharder
	lw      controller.ListerWatcher[T, L]
	r       typed.Reconciler[T]
	opts    typed.Options
	preds   []typed.Predicate[T]
	copts   []controller.Options[T]
	workers chan struct{}

	// related add the Related sources to each shard's loop.
	related []relatedSource[T, L]
	// errs are the mistakes of Related calls, returned by Run.
	errs []error

	mu     sync.Mutex
	shards map[int]*controller.Controller[T, L]
}

// relatedSource adds a Related source to the loop of shard sh, whose primary cache is
// primary. It returns the caches of its own to run alongside the shard's, and what to
// call once the shard's loop has returned.
type relatedSource[T event.Object, L reflect.List] func(ctx context.Context, sh Shard, loop *typed.Loop[T, L],
	primary *controller.Controller[T, L]) (run []func(context.Context) error, release func())

// NewLoop returns a Loop that reconciles, with r, the objects of lw in the shards s gives
// this replica. opts and preds are those of typed.NewLoop, except that Options.Workers
// counts the reconciles of the whole replica; copts configure each shard's cache (its
// Name gets the shard number appended).
func NewLoop[T event.Object, L reflect.List](s *Sharder, lw controller.ListerWatcher[T, L], r typed.Reconciler[T], opts typed.Options, preds ...typed.Predicate[T]) *Loop[T, L] {
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
	return &Loop[T, L]{sharder: s, lw: lw, r: r, opts: opts, preds: preds, workers: make(chan struct{}, opts.Workers)}
}

// WithCacheOptions sets the options of each shard's cache, for example a Transform, and
// returns l.
func (l *Loop[T, L]) WithCacheOptions(opts ...controller.Options[T]) *Loop[T, L] {
	l.copts = opts
	return l
}

// Cached returns the number of objects cached for each shard this replica works on.
func (l *Loop[T, L]) Cached() map[int]int {
	if l == nil {
		return map[int]int{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int]int, len(l.shards))
	for i, c := range l.shards {
		out[i] = c.Store().Len()
	}
	return out
}

// Get returns the cached object of key if this replica holds its shard.
func (l *Loop[T, L]) Get(key string) (T, bool) {
	var shards map[int]*controller.Controller[T, L]
	if l != nil {
		l.mu.Lock()
		shards = maps.Clone(l.shards)
		l.mu.Unlock()
	}
	for _, c := range shards {
		if obj, ok := c.Store().Get(key); ok {
			return obj, true
		}
	}
	var zero T
	return zero, false
}

// NeedLeaderElection returns false: every replica runs the Loop, and they divide the
// shards among them, so that a manager.Manager runs it on every replica, leading or not.
func (l *Loop[T, L]) NeedLeaderElection() bool { return false }

// Run divides the shards with the other replicas through the Sharder and reconciles the
// keys of those held, until ctx ends; see Sharder.Run.
func (l *Loop[T, L]) Run(ctx context.Context) error {
	if err := l.check(); err != nil {
		return err
	}
	return l.sharder.Run(ctx, l.RunShard)
}

// check returns the mistakes in l's arguments, which Run and RunShard refuse to run with.
func (l *Loop[T, L]) check() error {
	switch {
	case l == nil:
		return fmt.Errorf("%w: a nil Loop", typed.ErrNilArgument)
	case l.sharder == nil:
		return fmt.Errorf("%w: the Loop's sharder", typed.ErrNilArgument)
	case guard.IsNil(l.lw):
		return fmt.Errorf("%w: the Loop's ListerWatcher", typed.ErrNilArgument)
	case guard.IsNil(l.r):
		return fmt.Errorf("%w: the Loop's reconciler", typed.ErrNilArgument)
	case len(l.errs) > 0:
		return errors.Join(l.errs...)
	}
	for i, p := range l.preds {
		if p == nil {
			return fmt.Errorf("%w: the Loop's predicate %d", typed.ErrNilArgument, i)
		}
	}
	return nil
}

// RunShard reconciles the keys of sh until ctx ends, then lets its in-flight reconciles
// finish and stops its cache. Run calls it for each shard held; call it yourself to run
// several loops on the shards of one Sharder:
//
//	sharder.Run(ctx, func(ctx context.Context, sh shard.Shard) {
//		var wg sync.WaitGroup
//		wg.Go(func() { websites.RunShard(ctx, sh) })
//		wg.Go(func() { databases.RunShard(ctx, sh) })
//		wg.Wait()
//	})
//
// The mistakes Run returns as errors (a nil Sharder, ListerWatcher, reconciler or
// predicate, a Related call's) make RunShard report them (Options.OnError, or the log)
// and return at once.
func (l *Loop[T, L]) RunShard(ctx context.Context, sh Shard) {
	if err := l.check(); err != nil {
		if l == nil {
			klog.FromContext(ctx).Error(err, "sharded loop not run", "shard", sh.Index)
			return
		}
		l.report(ctx, "", err)
		return
	}
	lw, err := Filter[T, L](l.lw, sh.Space, []int{sh.Index})
	if err != nil {
		l.report(ctx, "", err)
		return
	}
	name := fmt.Sprintf("%s/shard-%d", l.opts.Name, sh.Index)
	copts := append(append([]controller.Options[T](nil), l.copts...), controller.Options[T]{Name: name})
	c := controller.New[T, L](lw, copts...)
	opts := l.opts
	opts.Name = name
	opts.Metrics = l.metrics(sh.Index)
	loop := typed.NewLoop(c, typed.ReconcilerFunc[T](func(ctx context.Context, req typed.Request[T]) (typed.Result, error) {
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

	caches := []func(context.Context) error{c.Run}
	for _, add := range l.related {
		run, release := add(ctx, sh, loop, c)
		caches = append(caches, run...)
		if release != nil {
			defer release()
		}
	}
	// The caches outlive the loop, which reads them until its in-flight reconciles end.
	cctx, stopCaches := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopCaches()
	for _, run := range caches {
		wg.Go(func() {
			if err := run(cctx); err != nil {
				l.report(ctx, "", err)
			}
		})
	}
	l.mu.Lock()
	if l.shards == nil {
		l.shards = map[int]*controller.Controller[T, L]{}
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
// ready once its cache has synced empty: no reconcile will say it.
func (l *Loop[T, L]) watchShard(ctx context.Context, sh Shard, c *controller.Controller[T, L]) {
	if c.WaitForSync(ctx) != nil {
		return
	}
	if c.Store().Len() == 0 {
		sh.Ready()
	}
	m := l.sharder.opts.Metrics
	if m == nil {
		return
	}
	t := time.NewTicker(l.sharder.opts.RetryPeriod)
	defer t.Stop()
	for {
		m.ShardObjects(l.sharder.opts.Name, sh.Index, c.Store().Len())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// report hands err, about key (or none), to Options.OnError, or logs it.
func (l *Loop[T, L]) report(ctx context.Context, key string, err error) {
	if l.opts.OnError != nil {
		l.opts.OnError(ctx, key, err)
		return
	}
	klog.FromContext(ctx).Error(err, "sharded loop", "loop", l.opts.Name, "key", key)
}

// metrics gives a shard's loop the replica's loop metrics, and its queue depth to the
// Sharder's metrics as the shard's keys.
func (l *Loop[T, L]) metrics(shard int) typed.Metrics {
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

// Related makes every event of lw's objects reconcile the keys keysOf maps them to, as
// typed.Related does, in the shard that holds each key; call it before Run.
//
// With ByNamespace, each shard held gets a cache of lw's objects in that shard too,
// filtered by the server as the primary's is: a namespaced object lies in its
// namespace's shard, with the primary objects it relates to. keysOf must then map an
// object to keys of its own namespace's shard (lw of a namespaced kind, mapped within
// its namespace): a key of another shard is not reconciled for that object, as its shard's
// replica never sees it, and is reported wrapping ErrOtherShard. With
// ByUID, an object's UID says nothing of the shard of the keys it maps to, so one cache
// of all of lw's objects, shared by the shards of the replica, feeds every shard's loop,
// and a shard reconciles only the keys whose objects its own cache holds; the others
// belong to other shards, whose loops reconcile them.
//
// It returns an error wrapping typed.ErrNilArgument for a nil l, lw, keysOf or
// predicate, and relates nothing then; Run returns the same error, so that an unchecked
// mistake still stops the Loop.
func Related[S event.Object, SL reflect.List, T event.Object, L reflect.List](l *Loop[T, L], lw controller.ListerWatcher[S, SL], keysOf func(S) []string, preds ...typed.Predicate[S]) error {
	var zero S
	if l == nil {
		return fmt.Errorf("%w: Related's Loop, for %T", typed.ErrNilArgument, zero)
	}
	name := fmt.Sprintf("%s/related-%T", l.opts.Name, zero)
	fail := func(err error) error {
		l.errs = append(l.errs, err)
		return err
	}
	switch {
	case guard.IsNil(lw):
		return fail(fmt.Errorf("%w: the ListerWatcher of %s", typed.ErrNilArgument, name))
	case keysOf == nil:
		return fail(fmt.Errorf("%w: the mapping of %s", typed.ErrNilArgument, name))
	}
	for i, p := range preds {
		if p == nil {
			return fail(fmt.Errorf("%w: predicate %d of %s", typed.ErrNilArgument, i, name))
		}
	}
	if l.sharder != nil && l.sharder.opts.Space.By == ByNamespace {
		l.related = append(l.related, func(ctx context.Context, sh Shard, loop *typed.Loop[T, L], _ *controller.Controller[T, L]) ([]func(context.Context) error, func()) {
			f, err := Filter[S, SL](lw, sh.Space, []int{sh.Index})
			if err != nil {
				l.report(ctx, "", err)
				return nil, nil
			}
			c := controller.New[S, SL](f, controller.Options[S]{Name: fmt.Sprintf("%s/shard-%d", name, sh.Index)})
			typed.Related(loop, c, func(obj S) []string {
				keys := keysOf(obj)
				in := keys[:0:0]
				for _, k := range keys {
					// The key's object, if any, is cached by its own namespace's shard; here it
					// would look deleted.
					if ns, _ := event.SplitKey(k); sh.Space.OfHash(Hash(ns)) != sh.Index {
						l.report(ctx, k, fmt.Errorf("%w: %s/%s maps to %s, of shard %d; %s is in shard %d",
							ErrOtherShard, obj.GetNamespace(), obj.GetName(), k, sh.Space.OfHash(Hash(ns)), obj.GetNamespace(), sh.Index))
						continue
					}
					in = append(in, k)
				}
				return in
			}, preds...)
			return []func(context.Context) error{c.Run}, nil
		})
		return nil
	}
	shared := &sharedCache[S, SL]{lw: lw, name: name, report: l.report}
	l.related = append(l.related, func(ctx context.Context, sh Shard, loop *typed.Loop[T, L], primary *controller.Controller[T, L]) ([]func(context.Context) error, func()) {
		c := shared.acquire(ctx)
		typed.Related(loop, c, func(obj S) []string {
			keys := keysOf(obj)
			held := keys[:0:0]
			for _, k := range keys {
				if _, ok := primary.Store().Get(k); ok {
					held = append(held, k)
				}
			}
			return held
		}, preds...)
		return nil, shared.release
	})
	return nil
}

// sharedCache is a cache of all of a related ListerWatcher's objects, shared by the
// shards of a replica: started by the first shard that needs it, stopped when the last
// one returns.
type sharedCache[S event.Object, SL reflect.List] struct {
	lw     controller.ListerWatcher[S, SL]
	name   string
	report func(context.Context, string, error)

	mu    sync.Mutex
	users int
	c     *controller.Controller[S, SL]
	stop  context.CancelFunc
	done  chan struct{}
}

func (s *sharedCache[S, SL]) acquire(ctx context.Context) *controller.Controller[S, SL] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users++; s.users == 1 {
		s.c = controller.New[S, SL](s.lw, controller.Options[S]{Name: s.name})
		cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		s.stop, s.done = stop, make(chan struct{})
		c, done := s.c, s.done
		go func() {
			defer close(done)
			if err := c.Run(cctx); err != nil {
				s.report(ctx, "", err)
			}
		}()
	}
	return s.c
}

func (s *sharedCache[S, SL]) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users--; s.users == 0 {
		s.stop()
		<-s.done
		s.c = nil
	}
}
