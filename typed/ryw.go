package typed

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/typed/consistency"
)

// DefaultStaleBound is how long a key waits for its caches to apply its own writes before
// the Loop says so at the default log level and asks the caches to catch up.
const DefaultStaleBound = 5 * time.Second

// Consistent is a Source whose caches say how far they have applied the server's changes:
// a controller, a Manager's cache (one cache per namespace). With one, as the Loop's
// Source or a Related source, the Loop reads its own writes: a key is not reconciled while
// a cache of the written object's type and namespace has not applied a write that a
// reconcile of the key made (see package consistency and Options.DisableReadYourWrites).
type Consistent interface {
	// Watermarks returns the caches that may hold objects of namespace ("" for
	// cluster-scoped objects).
	Watermarks(namespace string) []eventcache.Watermarked
	// Fence waits until every cache of the source is at least as new as a consistent
	// read taken when it is called.
	Fencer
}

// ConsistencyMetrics is implemented by an Options.Metrics that also wants to know how
// read-your-writes holds keys back. Like Metrics, every method carries the loop's name
// and a panic in one is recovered and logged.
type ConsistencyMetrics interface {
	// KeysWaiting is called with the number of keys waiting for their caches.
	KeysWaiting(loop string, n int)
	// WriteWait is called when a key stops waiting, with how long it waited.
	WriteWait(loop string, d time.Duration)
	// StaleBoundHit is called each time a key has waited Options.StaleBound.
	StaleBoundHit(loop string)
	// FenceDuration is called when a Run's fence is passed, with how long it took.
	FenceDuration(loop string, d time.Duration)
}

// fenceRetry bounds the wait between two attempts at a fence whose read failed.
const fenceRetry = 30 * time.Second

// Fencer is a cache that can wait until it is at least as new as a consistent read
// taken when Fence is called: a controller, a Manager's cache.
type Fencer interface {
	Fence(ctx context.Context) error
}

// fence is Fence of every Consistent source, which Run calls before it reconciles
// anything: a replica that takes over (a new term as leader, a restart) never acts on a
// cache older than the writes of the replica that held the keys before it.
func (l *Loop[T]) fence(ctx context.Context, logger klog.Logger) bool {
	l.mu.Lock()
	caches := make([]Fencer, len(l.watched))
	for i, w := range l.watched {
		caches[i] = w.src
	}
	l.mu.Unlock()
	return l.Fence(klog.NewContext(ctx, logger), caches...)
}

// Fence waits until each of caches is at least as new as a consistent read taken now,
// with the Loop's read-your-writes (nothing when Options.DisableReadYourWrites), and
// reports false if ctx ends first. Run does so for its Sources as it starts; a Source
// whose parts come and go (Parts) does so for the caches of each part that joins, before
// its keys are reconciled. A read that fails is logged and tried again, after 1 s
// doubling up to 30 s: with the server unreachable no write could succeed anyway.
func (l *Loop[T]) Fence(ctx context.Context, caches ...Fencer) bool {
	if l.opts.DisableReadYourWrites || len(caches) == 0 {
		return true
	}
	logger := klog.FromContext(ctx)
	start := l.opts.Clock.Now()
	for wait := time.Second; ; wait = min(2*wait, fenceRetry) {
		errs := make([]error, len(caches))
		var wg sync.WaitGroup
		for i, c := range caches {
			wg.Go(func() { errs[i] = c.Fence(ctx) })
		}
		wg.Wait()
		if ctx.Err() != nil {
			return false
		}
		err := errors.Join(errs...)
		if err == nil {
			took := l.opts.Clock.Since(start)
			if took > l.opts.StaleBound {
				logger.Info("The caches took long to reach the consistent point taken as they started to be read", "loop", l.opts.Name, "took", took)
			}
			l.consistencyMetrics.Call(ctx, "FenceDuration", func(m ConsistencyMetrics) { m.FenceDuration(l.opts.Name, took) })
			return true
		}
		logger.Error(err, "Reading the consistent point the caches must reach before the loop reads them; trying again", "loop", l.opts.Name, "after", wait)
		t := l.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
		}
	}
}

// watchedSource is a Consistent source of the Loop, and the Go type of its objects.
type watchedSource struct {
	typ reflect.Type
	src Consistent
}

// watch adds src to the sources whose writes the Loop waits for, if it is Consistent.
func (l *Loop[T]) watch(typ reflect.Type, src any) {
	if c, ok := src.(Consistent); ok {
		l.mu.Lock()
		l.watched = append(l.watched, watchedSource{typ, c})
		l.mu.Unlock()
	}
}

// pendingWrites are the writes of a key's reconciles that its caches have not yet
// applied. Guarded by Loop.mu.
type pendingWrites struct {
	conds  []*condition
	parked bool
	since  time.Time
	bound  clock.Timer
	waited time.Duration // the bounds passed while parked
}

// condition is one thing a key waits for: a cache applying rv, or, for a deletion (rv
// 0), a cache no longer holding namespace/name with uid.
type condition struct {
	wm              eventcache.Watermarked
	rv              uint64
	namespace, name string
	uid             types.UID
	stop            func() bool
}

// recorder is the consistency.Recorder of one reconcile, and the context that carries it:
// one allocation per reconcile.
type recorder[T event.Object] struct {
	consistency.RecorderContext
	l   *Loop[T]
	run *loopRun[T]
	key string
}

func (r *recorder[T]) Wrote(obj runtime.Object) { r.l.record(r.run, r.key, obj, false) }

func (r *recorder[T]) Deleted(obj runtime.Object) { r.l.record(r.run, r.key, obj, true) }

// withRecorder returns ctx with the recorder of key's reconcile, when the Loop reads its
// own writes.
func (l *Loop[T]) withRecorder(ctx context.Context, run *loopRun[T], key string) context.Context {
	if l.opts.DisableReadYourWrites {
		return ctx
	}
	r := &recorder[T]{l: l, run: run, key: key}
	r.RecorderContext = consistency.RecorderContext{Context: ctx, Recorder: r}
	return &r.RecorderContext
}

// record makes key wait for every cache of the Loop that may hold obj to apply the write
// the server answered with obj, or, when gone, its deletion.
func (l *Loop[T]) record(run *loopRun[T], key string, obj runtime.Object, gone bool) {
	o, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	c := condition{namespace: o.GetNamespace(), name: o.GetName(), uid: o.GetUID()}
	if !gone {
		if c.rv, err = strconv.ParseUint(o.GetResourceVersion(), 10, 64); err != nil || c.rv == 0 {
			return // an opaque resourceVersion orders nothing; 0 is a deletion's mark
		}
	}
	typ := reflect.TypeOf(obj)
	l.mu.Lock()
	watched := slices.Clone(l.watched)
	l.mu.Unlock()
	// The sources are asked without the Loop's lock: a source's own lock (a sharded
	// Loop's parts) is held while it adds handlers, which waits for its caches' drain
	// loops, which call recheck.
	var wms []eventcache.Watermarked
	for _, w := range watched {
		if w.typ != typ {
			continue
		}
		for _, wm := range w.src.Watermarks(c.namespace) {
			if wm.Selects(o) || wm.HoldsUID(c.namespace, c.name, c.uid) {
				wms = append(wms, wm) // it shows the object before or after the write
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run != run {
		return // a reconcile outliving its Run
	}
	for _, wm := range wms {
		c := c
		c.wm = wm
		l.awaitLocked(run, key, &c)
	}
}

// awaitLocked adds c to key's conditions, unless it holds already or one as strict is
// there. Called with l.mu held.
func (l *Loop[T]) awaitLocked(run *loopRun[T], key string, c *condition) {
	pw := run.writes[key]
	if pw != nil && c.rv > 0 {
		for i, old := range pw.conds {
			if old.wm == c.wm && old.rv > 0 {
				if old.rv >= c.rv {
					return
				}
				old.stop()
				pw.conds = slices.Delete(pw.conds, i, i+1)
				break
			}
		}
	}
	if !l.armLocked(run, key, c) {
		return
	}
	if pw == nil {
		pw = &pendingWrites{}
		run.writes[key] = pw
		run.nwrites.Add(1)
	}
	pw.conds = append(pw.conds, c)
}

// armLocked asks c's cache to call back when c may hold, and reports false, asking
// nothing, when it holds already. Called with l.mu held: the callback takes it, and a
// cache never calls back from NotifyApplied itself.
func (l *Loop[T]) armLocked(run *loopRun[T], key string, c *condition) bool {
	applied, ok := c.wm.Applied()
	if !ok {
		return false // a cache that stopped or cannot order versions: nothing to wait for
	}
	rv := c.rv
	if rv == 0 { // a deletion: wait while the cache holds the object, one advance at a time
		if !c.wm.HoldsUID(c.namespace, c.name, c.uid) {
			return false
		}
		rv = applied + 1
	}
	stop, reached := c.wm.NotifyApplied(rv, func() { l.recheck(run, key, c) })
	if reached {
		if c.rv > 0 {
			return false
		}
		return l.armLocked(run, key, c) // applied moved meanwhile: look again
	}
	c.stop = stop
	return true
}

// recheck is a cache's callback for c: it drops c if it holds, and lets key go once
// nothing is left to wait for.
func (l *Loop[T]) recheck(run *loopRun[T], key string, c *condition) {
	l.mu.Lock()
	pw := run.writes[key]
	if l.run != run || pw == nil {
		l.mu.Unlock()
		return
	}
	i := slices.Index(pw.conds, c)
	if i < 0 || l.armLocked(run, key, c) {
		l.mu.Unlock()
		return
	}
	pw.conds = slices.Delete(pw.conds, i, i+1)
	if len(pw.conds) > 0 {
		l.mu.Unlock()
		return
	}
	delete(run.writes, key)
	run.nwrites.Add(-1)
	parked := pw.parked
	if parked {
		if pw.bound.Stop() {
			run.timers.Done()
		}
		run.parked--
		run.q.Unpark(key)
	}
	n := run.parked
	l.mu.Unlock()
	if parked {
		waited := l.opts.Clock.Since(pw.since)
		l.consistencyMetrics.Call(context.Background(), "WriteWait", func(m ConsistencyMetrics) { m.WriteWait(l.opts.Name, waited) })
		l.consistencyMetrics.Call(context.Background(), "KeysWaiting", func(m ConsistencyMetrics) { m.KeysWaiting(l.opts.Name, n) })
		l.depth(run.q)
	}
}

// park holds key back, as its worker's key, when its caches have not applied its writes:
// the key is parked in the queue, holding no worker and growing no backoff, until
// recheck lets it go. It reports whether it parked key.
func (l *Loop[T]) park(run *loopRun[T], key string, p priority) bool {
	l.mu.Lock()
	pw := run.writes[key]
	if pw == nil || l.run != run {
		l.mu.Unlock()
		return false
	}
	run.q.Park(key, p)
	pw.parked, pw.since = true, l.opts.Clock.Now()
	l.boundLocked(run, key, pw, l.opts.StaleBound)
	run.parked++
	n := run.parked
	l.mu.Unlock()
	l.consistencyMetrics.Call(context.Background(), "KeysWaiting", func(m ConsistencyMetrics) { m.KeysWaiting(l.opts.Name, n) })
	return true
}

// boundLocked sets pw's timer: when key has waited d more, the Loop says so and asks the
// caches it waits for to catch up, then waits twice as long before it does so again.
// Called with l.mu held.
func (l *Loop[T]) boundLocked(run *loopRun[T], key string, pw *pendingWrites, d time.Duration) {
	run.timers.Add(1)
	pw.bound = l.afterFunc(d, func() {
		defer run.timers.Done()
		l.mu.Lock()
		if l.run != run || run.writes[key] != pw || !pw.parked {
			l.mu.Unlock()
			return
		}
		first := pw.waited == 0
		pw.waited += d
		waited := pw.waited
		waits := make([]any, 0, 2*len(pw.conds))
		var progress []func()
		for _, c := range pw.conds {
			applied, _ := c.wm.Applied()
			waits = append(waits, c.rv, applied)
			// A bookmark first; a consistent relist once one did not do.
			if r, ok := c.wm.(interface{ RequestRelist() }); ok && !first {
				progress = append(progress, r.RequestRelist)
			} else if p, ok := c.wm.(interface{ RequestProgress() }); ok {
				progress = append(progress, p.RequestProgress)
			}
		}
		run.timers.Add(1)
		l.mu.Unlock()
		go func() { // the next bound, off the clock's goroutine
			defer run.timers.Done()
			l.mu.Lock()
			if l.run == run && run.writes[key] == pw && pw.parked {
				l.boundLocked(run, key, pw, 2*d)
			}
			l.mu.Unlock()
		}()
		logger := run.logger.V(0)
		if !first {
			logger = run.logger.V(2)
		}
		logger.Info("A key waits for its caches to apply its own writes: asking them to catch up",
			"loop", l.opts.Name, "key", key, "waited", waited, "waitingForAndApplied", waits)
		l.consistencyMetrics.Call(context.Background(), "StaleBoundHit", func(m ConsistencyMetrics) { m.StaleBoundHit(l.opts.Name) })
		for _, request := range progress {
			request()
		}
	})
}

// stopWritesLocked drops every key's pending writes at the end of run. Called with l.mu
// held.
func (l *Loop[T]) stopWritesLocked(run *loopRun[T]) {
	for _, pw := range run.writes {
		for _, c := range pw.conds {
			c.stop()
		}
		if pw.parked && pw.bound.Stop() {
			run.timers.Done()
		}
	}
	clear(run.writes)
	run.nwrites.Store(0)
	run.parked = 0
}
