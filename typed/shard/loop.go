package shard

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/nilness"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
)

// Loop reconciles the keys of the shards this replica holds: for each shard, while the
// Sharder gives it, a cache of that shard's objects only (the API server filters them,
// see Filter) and a typed.Loop over it.
//
// In DESIGN terms, a shard's cache is a controller of its own: gaining a shard starts
// one, whose initial list reconciles every key of the shard (at the initial list's
// priority, below live changes); losing a shard stops its typed.Loop, which finishes its
// in-flight reconciles and drops the keys still queued without reconciling them, and
// then stops its cache. Objects that leave this replica's scope that way are not
// deleted: no event reports them, and no deletion is reconciled for them. An object
// never leaves a shard by itself, as its UID and namespace never change.
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

	mu     sync.Mutex
	shards map[int]*controller.Controller[T, L]
}

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
	l.mu.Lock()
	shards := maps.Clone(l.shards)
	l.mu.Unlock()
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
	switch {
	case l.sharder == nil:
		return fmt.Errorf("%w: the Loop's sharder", typed.ErrNilArgument)
	case nilness.IsNil(l.lw):
		return fmt.Errorf("%w: the Loop's ListerWatcher", typed.ErrNilArgument)
	case nilness.IsNil(l.r):
		return fmt.Errorf("%w: the Loop's reconciler", typed.ErrNilArgument)
	}
	return l.sharder.Run(ctx, l.RunShard)
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
func (l *Loop[T, L]) RunShard(ctx context.Context, sh Shard) {
	lw, err := Filter[T, L](l.lw, sh.Space, []int{sh.Index})
	if err != nil {
		l.report(ctx, err)
		return
	}
	name := fmt.Sprintf("%s/shard-%d", l.opts.Name, sh.Index)
	copts := append(append([]controller.Options[T](nil), l.copts...), controller.Options[T]{Name: name})
	c := controller.New[T, L](lw, copts...)
	opts := l.opts
	opts.Name = name
	opts.Metrics = l.metrics(sh.Index)
	loop := typed.NewLoop(c, typed.ReconcilerFunc[T](func(ctx context.Context, req typed.Request[T]) (typed.Result, error) {
		select {
		case l.workers <- struct{}{}:
		case <-ctx.Done():
			return typed.Result{}, nil // the shard is being given up: its queued keys are dropped
		}
		defer func() { <-l.workers }()
		sh.Ready()
		return l.r.Reconcile(ctx, req)
	}), opts, l.preds...)

	// The cache outlives the loop, which reads it until its in-flight reconciles end.
	cctx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopCache()
	wg.Go(func() {
		if err := c.Run(cctx); err != nil {
			l.report(ctx, err)
		}
	})
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
	wg.Go(func() { l.watchShard(ctx, sh, c) })
	if err := loop.Run(ctx); err != nil {
		l.report(ctx, err)
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

func (l *Loop[T, L]) report(ctx context.Context, err error) {
	if l.opts.OnError != nil {
		l.opts.OnError(ctx, "", err)
		return
	}
	klog.FromContext(ctx).Error(err, "sharded loop", "loop", l.opts.Name)
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
