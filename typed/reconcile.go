package typed

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/typedinformer/typedinformer/typed/predicate"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
)

// Request is what a reconciler is asked to make right: one key, with the freshest state
// the cache holds for it.
type Request[T event.Object] struct {
	// Key is the key the Source computed for the object (a controller, with its key
	// function).
	Key string
	// Namespace ("" for cluster-scoped objects) and Name are those of Object, or of
	// LastKnown for a deletion. A key with neither (one that a Related mapping produced
	// for an object the cache never held) is read as namespace/name.
	Namespace string
	Name      string
	// Object is the freshest cached state, or nil when the object is not in the cache.
	Object T
	// Deleted is true when the object is not in the cache. LastKnown then holds the last
	// state the cache knew, when it knew one, for cleanup that needs it.
	Deleted   bool
	LastKnown T
}

// Result says what to do with a key after a reconcile that returned no error.
type Result struct {
	// RequeueAfter, when positive, reconciles the key again after this long.
	RequeueAfter time.Duration
	// RequeueAt, when set, reconciles the key again at this time of the Loop's clock
	// (Options.Clock), at once when it has passed: for a schedule, whose next time the
	// reconcile computes from the clock, RequeueAfter would count from when the Loop
	// schedules it, after the reconcile returned. With both set, the earlier wins.
	RequeueAt time.Time
}

// requeues says whether r asks for a requeue.
func (r Result) requeues() bool { return r.RequeueAfter > 0 || !r.RequeueAt.IsZero() }

// requeueIn says whether r asks for a requeue, and in how long from now on clk, which
// it reads only for RequeueAt: not on every reconcile.
func (r Result) requeueIn(clk clock.PassiveClock) (time.Duration, bool) {
	if r.RequeueAt.IsZero() {
		return r.RequeueAfter, r.requeues()
	}
	d := max(r.RequeueAt.Sub(clk.Now()), 0)
	if r.RequeueAfter > 0 {
		d = min(d, r.RequeueAfter)
	}
	return d, true
}

// Reconciler makes the world match one key's desired state. It must be idempotent: it
// can be called any number of times for a key, and sees only the newest state.
type Reconciler[T event.Object] interface {
	Reconcile(ctx context.Context, req Request[T]) (Result, error)
}

// ReconcilerFunc adapts a plain function to a Reconciler.
type ReconcilerFunc[T event.Object] func(ctx context.Context, req Request[T]) (Result, error)

// Reconcile calls f.
func (f ReconcilerFunc[T]) Reconcile(ctx context.Context, req Request[T]) (Result, error) {
	return f(ctx, req)
}

// registered checks a Source's answer to AddHandler: a Registration, or an error.
func registered(reg *controller.Registration, err error) (*controller.Registration, error) {
	if err == nil && reg == nil {
		return nil, fmt.Errorf("%w and no error from AddHandler", ErrNoRegistration)
	}
	return reg, err
}

// Metrics receives a Loop's counters and gauges. Every method carries the loop's name
// (Options.Name), so that one sink serves many loops, and no method name is used by
// another interface of the family (controller.Metrics, shard.Metrics): one type can
// implement them all, and be given once to a Manager (manager.Metrics). Implementations
// must be safe for concurrent use; a panic in one of their methods is recovered and
// logged.
type Metrics interface {
	// QueueDepth is called with the number of keys waiting. Its calls are made one at a
	// time, in the order of the depths they carry, so the last one gives the depth now.
	QueueDepth(loop string, depth int)
	// Retry is called each time a key is put back after an error.
	Retry(loop string)
	// ReconcileLatency is called after each reconcile.
	ReconcileLatency(loop string, d time.Duration)
	// ReconcileError is called for each reconcile that returned an error.
	ReconcileError(loop string, terminal bool)
}

// WorkMetrics is implemented by an Options.Metrics that also wants what client-go's
// workqueue metrics and controller-runtime's reconcile metrics report (workqueue_adds_total,
// workqueue_queue_duration_seconds, workqueue_work_duration_seconds,
// controller_runtime_reconcile_total by result, controller_runtime_active_workers, ...):
// the Loop checks for it with a type assertion, as for ConsistencyMetrics. Like Metrics,
// every method carries the loop's name, and a panic in one is recovered and logged.
// Without it the Loop reads no clock for these.
type WorkMetrics interface {
	// Workers is called when Run starts its workers, with Options.Workers.
	Workers(loop string, n int)
	// KeysQueued is called with the number of keys queued since its last call: a key
	// counts when it becomes queued, not when it is added again while it waits, as
	// client-go's workqueue counts adds. Its calls are made one at a time.
	KeysQueued(loop string, n int)
	// WorkStarted is called when a worker takes a key to reconcile it, with how long the
	// key waited since it was queued (since its caches applied its writes, for a key that
	// waited for them), and the time the work starts, which WorkDone repeats.
	WorkStarted(loop string, waited time.Duration, start time.Time)
	// WorkDone is called when the worker is done with the key it took at start.
	WorkDone(loop string, start time.Time)
	// Reconciled is called after each reconcile, with what it came to; a hand-over's
	// reconciles of deletions (RunHandingOver) included.
	Reconciled(loop string, outcome Outcome)
}

// Outcome is what a reconcile came to, as WorkMetrics.Reconciled reports it.
type Outcome uint8

const (
	// Succeeded: no error, and no Result.RequeueAfter.
	Succeeded Outcome = iota
	// RequeuedAfter: no error, and a Result.RequeueAfter.
	RequeuedAfter
	// Failed: an error that is not Terminal; the key is retried (unless MaxRetries is
	// reached, or in a hand-over).
	Failed
	// FailedTerminal: a Terminal error; the key waits for its next event.
	FailedTerminal
	// Panicked: the reconciler panicked; the panic, recovered, is a Failed reconcile's
	// error.
	Panicked
	// Interrupted: an error that says only that the reconcile was cut short by the Loop
	// stopping or its part moving; not a failure.
	Interrupted
)

// String returns the outcome's name: "success", "requeue_after", "error",
// "terminal_error", "panic" or "interrupted".
func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "success"
	case RequeuedAfter:
		return "requeue_after"
	case Failed:
		return "error"
	case FailedTerminal:
		return "terminal_error"
	case Panicked:
		return "panic"
	case Interrupted:
		return "interrupted"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// outcome classifies a reconcile's result; ctx is the Loop's, rctx the reconcile's.
func outcome(ctx, rctx context.Context, requeue bool, err error) Outcome {
	var p *controller.PanicError
	switch {
	case err == nil && requeue:
		return RequeuedAfter
	case err == nil:
		return Succeeded
	case IsTerminal(err):
		return FailedTerminal
	case interrupted(ctx, err) || interrupted(rctx, err):
		return Interrupted
	case errors.As(err, &p):
		return Panicked
	}
	return Failed
}

// Options configure a Loop. The zero value is usable, and right for production: a failing
// key is retried with capped exponential backoff for as long as it fails.
type Options struct {
	// Name identifies the loop in logs and metrics; the object type by default.
	Name string
	// Workers is how many keys are reconciled at once; 1 when zero.
	Workers int
	// MaxRetries, when positive, is how many times in a row a failing key is retried
	// before it is dropped until its next event (reported with ErrRetriesExhausted). Zero
	// or negative, the default, never gives up: with resyncs off, a key dropped after an
	// outage would never be reconciled again.
	MaxRetries int
	// RateLimiter spaces out retries; when nil (or a typed nil),
	// workqueue.DefaultTypedControllerRateLimiter (per key 5ms doubling up to 1000s,
	// overall 10 per second with bursts of 100). A panic in one of its methods is logged
	// and that default answers instead.
	RateLimiter workqueue.TypedRateLimiter[string]
	// OnError receives every reconcile error, including recovered panics and
	// ErrRetriesExhausted, instead of the log. It must not block. When nil, each error is
	// logged at error level with the loop's name and the key.
	OnError func(ctx context.Context, key string, err error)
	// Metrics receives counters and gauges; none when nil.
	Metrics Metrics
	// Clock times retries and Result.RequeueAfter; the real clock when nil (or a typed
	// nil). Tests use a fake one.
	Clock clock.WithDelayedExecution
	// DisableReadYourWrites turns read-your-writes off. By default a key is not
	// reconciled while a cache the Loop reads (its Source and Related sources, when
	// Consistent) has not applied a write that a reconcile of the key made through the
	// library's writers or reported with consistency.Wrote: a reconcile never acts on a
	// cache older than its key's own last write. A waiting key holds no worker and does
	// not grow its retry backoff.
	DisableReadYourWrites bool
	// StaleBound is how long a key waits for its caches before the Loop logs it at the
	// default level and asks them to catch up (see DefaultStaleBound, the default); it
	// keeps waiting, asking again at twice the wait each time.
	StaleBound time.Duration
}

// Source is what a Loop reconciles: events of objects of type T, each with its key, and
// the freshest object of a key. A *controller.Controller is one; so are the Manager's
// shared caches (manager.Cache, of one namespace or several read as one) and a sharded
// replica's caches of the shards it holds. The Loop depends on nothing else of them, so
// neither their list type nor how they are scoped reaches it.
type Source[T event.Object] interface {
	// AddHandler registers h under name: h first receives every object the source holds
	// (as additions, with Sync true), then every change, one event at a time and in
	// order per key. The Registration says when h has received that initial state, and
	// removes h.
	AddHandler(name string, h controller.Handler[T]) (*controller.Registration, error)
	// Get returns the freshest object of key; false when the source holds none, which
	// the Loop reads as a deletion.
	Get(key string) (T, bool)
}

// Loop reconciles the keys of one Source with a Reconciler. Create it with NewLoop, run
// the Source (a controller's Run, or the Manager), and run the Loop; Run can be called
// again after it returns (for example each time leadership is won), but not twice at
// once.
//
// Keys of live watch changes are reconciled before keys from the initial list, relists
// and resyncs (events whose Sync is true): a live change waits for at most the reconciles
// already running, one per worker, however many keys a startup list queued. A key queued
// by a sync event that then changes live moves up with the live keys. Sync keys are not
// starved: while they wait, at most 8 live keys are reconciled in a row before one of
// them. A retry or requeue keeps the priority its key was reconciled with.
type Loop[T event.Object] struct {
	src   Source[T]
	parts Parts[T] // src, when its keys are held in parts; nil otherwise
	r     Reconciler[T]
	opts  Options
	preds []predicate.Predicate[T]
	// metrics calls Options.Metrics, recovering a panic in it: its calls come from
	// workers and timers, where nothing else would recover.
	metrics guard.Metrics[Metrics]
	// consistencyMetrics is Options.Metrics when it is ConsistencyMetrics.
	consistencyMetrics guard.Metrics[ConsistencyMetrics]
	// work is Options.Metrics when it is WorkMetrics.
	work guard.Metrics[WorkMetrics]

	mu      sync.Mutex
	depthMu sync.Mutex // orders the QueueDepth reports
	related []func(enqueue func(key string, p priority)) (*controller.Registration, error)
	run     *loopRun[T] // the running Run's state; nil while not running
	// waiting holds the keys Enqueue was given while the Loop did not run, for the next
	// Run: a set, so that memory is by key, not by call.
	waiting map[string]struct{}
	// watched are the Consistent sources, whose writes a key waits for (see ryw.go).
	watched []watchedSource
}

// loopRun is the state of one Run: dropped, with everything it holds, when Run returns.
type loopRun[T event.Object] struct {
	q       *keyQueue
	limiter workqueue.TypedRateLimiter[string]
	enqueue func(key string, p priority)

	// Guarded by Loop.mu.
	regs []*controller.Registration
	// tombstones holds the last state of deleted keys while their key is pending (queued,
	// being reconciled, or with a retry scheduled), so memory for deletions is bounded by
	// keys pending. Whoever queues a key, or checks that it is no longer pending, holds
	// Loop.mu, so that no last state is dropped just before its key is queued again.
	tombstones map[string]T
	// retries holds the timer of each key's scheduled retry or requeue. client-go's
	// delaying queue cannot cancel an AddAfter, and a reconcile must replace what an
	// earlier one scheduled: a Terminal error drops the key until its next event.
	retries map[string]clock.Timer
	timers  sync.WaitGroup // timer functions that may still run
	// failing holds the keys the rate limiter counts failures of, so that Run's end can
	// forget them: a limiter given in Options outlives the Run, and a key must not start
	// the next Run (the next term as leader) closer to its retry cap.
	failing map[string]struct{}
	// With a Source that has Parts: the part each key being reconciled runs in, and a
	// channel closed (and replaced) each time such a reconcile ends, which HandOver
	// waits on.
	active     map[string]context.Context
	reconciled chan struct{}
	// slots holds a token per reconcile running, so that the workers and a part's
	// HandOver together run at most Options.Workers.
	slots chan struct{}
	// writes holds, by key, the writes its caches have not applied yet (guarded by
	// Loop.mu); nwrites counts them, so that a worker looks them up only when there are
	// some; parked counts the keys parked waiting for them (see ryw.go).
	writes  map[string]*pendingWrites
	nwrites atomic.Int64
	parked  int
	logger  klog.Logger
}

// NewLoop returns a Loop that reconciles src's keys with r. An event reconciles its key only
// when it passes every one of preds (none: every event does); see Predicate. A filtered
// deletion still gives its last state to a reconcile of its key that is due anyway, and
// is never kept for longer than its key is pending.
//
// Predicates are arguments rather than an Options field because Options is not generic:
// a field of type predicate.Predicate[T] would make every caller spell T in the Options literal,
// which NewLoop infers from src and r, and a field of a type that hides T would turn a predicate
// of the wrong type into an error at run time instead of compile time.
//
// Mistakes in the arguments are errors here, not at Run: a nil (or typed-nil) src or r,
// and a nil predicate (or a combinator of one), are errors wrapping
// controller.ErrNilArgument that name the argument.
func NewLoop[T event.Object](src Source[T], r Reconciler[T], opts Options, preds ...predicate.Predicate[T]) (*Loop[T], error) {
	var zero T
	switch {
	case guard.IsNil(src):
		return nil, fmt.Errorf("%w: NewLoop's source of %T", controller.ErrNilArgument, zero)
	case guard.IsNil(r):
		return nil, fmt.Errorf("%w: NewLoop's reconciler of %T", controller.ErrNilArgument, zero)
	}
	if err := predicate.Check(preds, fmt.Sprintf("NewLoop's %T", zero)); err != nil {
		return nil, err
	}
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("%T", zero)
	}
	// Typed nils count as unset: they would otherwise panic on a worker or timer.
	if guard.IsNil(opts.Clock) {
		opts.Clock = clock.RealClock{}
	}
	if guard.IsNil(opts.RateLimiter) {
		opts.RateLimiter = nil
	}
	if opts.StaleBound <= 0 {
		opts.StaleBound = DefaultStaleBound
	}
	parts, _ := src.(Parts[T])
	l := &Loop[T]{src: src, parts: parts, r: r, opts: opts, preds: slices.Clone(preds), metrics: guard.NewMetrics(opts.Metrics, "loop", opts.Name)}
	cm, _ := opts.Metrics.(ConsistencyMetrics)
	l.consistencyMetrics = guard.NewMetrics(cm, "loop", opts.Name)
	wm, _ := opts.Metrics.(WorkMetrics)
	l.work = guard.NewMetrics(wm, "loop", opts.Name)
	l.watch(reflect.TypeFor[T](), src)
	return l, nil
}

// made returns an error wrapping controller.ErrNilArgument for a nil Loop, or one not
// made by NewLoop (whose error went unchecked), which has nothing to run.
func (l *Loop[T]) made() error {
	if l == nil || l.src == nil {
		var zero T
		return fmt.Errorf("%w: a nil Loop of %T, or one not made by NewLoop", controller.ErrNilArgument, zero)
	}
	return nil
}

// Run reconciles until ctx is done: it registers its handlers (on its Source, and on
// those of Related), waits until each has the initial state of its source, and runs
// Options.Workers workers. Every key the Source holds is reconciled once after Run
// starts, and every later event reconciles its key, with the key the Source computed.
//
// When ctx ends it stops taking new keys, lets in-flight reconciles finish (their
// context is ctx: a reconcile that then fails with ctx's error was interrupted, which is
// logged at verbosity 2, not reported as a failure, and keeps a deletion's last state for
// RunHandingOver), unregisters
// its handlers and returns with none of its goroutines left. Keys still queued, retries
// still scheduled and the last states of deletions not yet reconciled are dropped: a
// deletion that must never be missed, even while no replica runs the Loop, needs a
// finalizer. When the keys move to another process that runs on, RunHandingOver
// reconciles those deletions first. Run returns an error wrapping
// controller.ErrAlreadyRunning if the Loop is already running, an error wrapping
// controller.ErrNilArgument for a nil Loop or one not made by NewLoop, and the mistakes
// of Related calls.
func (l *Loop[T]) Run(ctx context.Context) error {
	return l.serve(ctx, nil)
}

// serve is Run, and RunHandingOver when held is not nil.
func (l *Loop[T]) serve(ctx, held context.Context) error {
	if err := l.made(); err != nil {
		return err
	}
	var limiter workqueue.TypedRateLimiter[string] = workqueue.DefaultTypedControllerRateLimiter[string]()
	if l.opts.RateLimiter != nil {
		limiter = safeLimiter{l.opts.RateLimiter, limiter, klog.FromContext(ctx).WithValues("loop", l.opts.Name)}
	}
	run := &loopRun[T]{
		q:          newKeyQueue(l.work.Set()),
		limiter:    limiter,
		tombstones: map[string]T{},
		retries:    map[string]clock.Timer{},
		failing:    map[string]struct{}{},
		active:     map[string]context.Context{},
		reconciled: make(chan struct{}),
		slots:      make(chan struct{}, l.opts.Workers),
		writes:     map[string]*pendingWrites{},
		logger:     klog.FromContext(ctx),
	}
	run.enqueue = func(key string, p priority) {
		run.q.Add(key, p)
		l.depth(run.q)
	}
	l.mu.Lock()
	if l.run != nil {
		l.mu.Unlock()
		return fmt.Errorf("loop %q: %w", l.opts.Name, controller.ErrAlreadyRunning)
	}
	for key := range l.waiting {
		run.q.Add(key, livePriority)
	}
	l.waiting = nil
	l.run = run
	related := slices.Clone(l.related)
	l.mu.Unlock()
	defer l.stop(run)

	reg, err := registered(l.src.AddHandler(l.opts.Name, controller.HandlerFunc[T](func(ctx context.Context, e event.Event[T]) {
		pass := predicate.Passes(l.preds, e, func(err error) {
			l.report(ctx, klog.FromContext(ctx).WithValues("loop", l.opts.Name, "key", e.Key), e.Key, err, false)
		})
		l.mu.Lock()
		switch {
		case e.Type != event.Deleted:
			delete(run.tombstones, e.Key) // the object exists again, filtered or not
		case pass || run.pendingLocked(e.Key):
			// A filtered deletion enqueues nothing, but a reconcile of its key that is due
			// anyway finds the object gone and must get its last state.
			run.tombstones[e.Key] = e.Object
		}
		if pass {
			run.q.Add(e.Key, priorityOf(e.Sync))
		}
		l.mu.Unlock()
		if pass {
			l.depth(run.q)
		}
	})))
	if err != nil {
		return err
	}
	regs := []*controller.Registration{reg}
	for _, add := range related {
		reg, err := add(run.enqueue)
		if err != nil {
			l.addRegs(run, regs)
			return err
		}
		regs = append(regs, reg)
	}
	l.addRegs(run, regs)

	// Reconcilers must not act on a partial view of the cluster: wait until every source
	// has delivered its initial state.
	for _, reg := range regs {
		if reg.WaitForSync(ctx) != nil {
			return nil
		}
	}
	if !l.fence(ctx, run.logger) {
		return nil
	}
	l.work.Call(ctx, "Workers", func(m WorkMetrics) { m.Workers(l.opts.Name, l.opts.Workers) })
	var wg sync.WaitGroup
	for range l.opts.Workers {
		wg.Go(func() {
			for l.next(ctx, run) {
			}
		})
	}
	<-ctx.Done()
	run.q.ShutDown()
	wg.Wait() // in-flight reconciles finish
	if held != nil {
		l.drain(held, run)
	}
	return nil
}

func (l *Loop[T]) addRegs(run *loopRun[T], regs []*controller.Registration) {
	l.mu.Lock()
	run.regs = append(run.regs, regs...)
	l.mu.Unlock()
}

// stop ends run: its handlers, its scheduled retries and its queue.
func (l *Loop[T]) stop(run *loopRun[T]) {
	l.mu.Lock()
	regs := run.regs
	for _, t := range run.retries {
		if t.Stop() {
			run.timers.Done()
		}
	}
	for key := range run.failing {
		run.limiter.Forget(key)
	}
	clear(run.retries)
	clear(run.failing)
	clear(run.tombstones)
	l.stopWritesLocked(run)
	l.run = nil
	l.mu.Unlock()
	for _, reg := range regs {
		reg.Remove()
	}
	run.timers.Wait()
	run.q.ShutDown()
}

// pendingLocked reports whether key is queued, being reconciled or has a retry scheduled.
// Called with Loop.mu held.
func (run *loopRun[T]) pendingLocked(key string) bool {
	_, retry := run.retries[key]
	return retry || run.q.Pending(key)
}

// Enqueue makes the Loop reconcile key, as an event of the Source for it would, with
// the priority of a live change; a key already queued is reconciled once. It is for keys
// from outside the cluster (a webhook, a timer) and for a reconciler that asks for another
// key. While the Loop does not run, the key waits, and the next Run reconciles it; keys
// waiting cost memory by key, not by call. key must be a key of the Source's key
// function; Enqueue does not check it.
func (l *Loop[T]) Enqueue(key string) {
	l.mu.Lock()
	run := l.run
	if run == nil || !run.q.Add(key, livePriority) { // not running, or stopping
		if l.waiting == nil {
			l.waiting = map[string]struct{}{}
		}
		l.waiting[key] = struct{}{}
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.depth(run.q)
}

func (l *Loop[T]) depth(q *keyQueue) {
	if !l.metrics.Set() && !l.work.Set() {
		return
	}
	// Under a lock, so that reports arrive in the order of the lengths they carry: a
	// goroutine descheduled between reading the length and reporting it would otherwise
	// leave a stale depth as the gauge's value until the next change.
	l.depthMu.Lock()
	defer l.depthMu.Unlock()
	n, adds := q.LenAndAdds()
	l.metrics.Call(context.Background(), "QueueDepth", func(m Metrics) { m.QueueDepth(l.opts.Name, n) })
	if added := adds - q.reportedAdds; added > 0 {
		q.reportedAdds = adds
		l.work.Call(context.Background(), "KeysQueued", func(m WorkMetrics) { m.KeysQueued(l.opts.Name, int(added)) })
	}
}

// retryAfter schedules key to be reconciled again after d at priority p, replacing what
// was scheduled.
func (l *Loop[T]) retryAfter(run *loopRun[T], key string, p priority, d time.Duration) {
	l.mu.Lock()
	if l.run != run {
		l.mu.Unlock()
		return // Run is returning; nothing may outlive it
	}
	l.cancelRetryLocked(run, key)
	if d <= 0 { // due already: a fake clock's timer would wait for its next step
		run.q.Add(key, p)
		l.mu.Unlock()
		l.depth(run.q)
		return
	}
	run.timers.Add(1)
	var t clock.Timer
	t = l.afterFunc(d, func() {
		defer run.timers.Done()
		l.mu.Lock()
		current := run.retries[key] == t
		if current {
			delete(run.retries, key)
			run.q.Add(key, p) // under l.mu: the key never looks idle between retry and queue
		}
		l.mu.Unlock()
		if current {
			l.depth(run.q)
		}
	})
	run.retries[key] = t
	l.mu.Unlock()
}

// cancelRetryLocked cancels key's scheduled retry, if any. Called with l.mu held.
func (l *Loop[T]) cancelRetryLocked(run *loopRun[T], key string) {
	if t, ok := run.retries[key]; ok {
		if t.Stop() {
			run.timers.Done()
		}
		delete(run.retries, key)
	}
}

// afterFunc runs f once d has passed on the Loop's clock, in a goroutine of its own.
// k8s.io/utils' FakeClock runs its timers' functions while holding its lock, and the
// Loop stops timers while holding l.mu, which those functions take: run by the clock
// itself, f and a Stop would wait for each other for ever.
func (l *Loop[T]) afterFunc(d time.Duration, f func()) clock.Timer {
	return l.opts.Clock.AfterFunc(d, func() { go f() })
}

// next reconciles one key; it returns false once the queue has shut down.
func (l *Loop[T]) next(ctx context.Context, run *loopRun[T]) bool {
	key, prio, queued, shutdown := run.q.GetTimed()
	if shutdown {
		return false
	}
	if run.nwrites.Load() > 0 && l.park(run, key, prio) {
		return true // its caches have not applied its writes yet; recheck lets it go
	}
	defer run.q.Done(key)
	if ctx.Err() != nil {
		return false // Run is about to shut the queue down; start nothing
	}
	if l.work.Set() {
		start := time.Now()
		l.work.Call(ctx, "WorkStarted", func(m WorkMetrics) { m.WorkStarted(l.opts.Name, start.Sub(queued), start) })
		defer l.work.Call(ctx, "WorkDone", func(m WorkMetrics) { m.WorkDone(l.opts.Name, start) })
	}
	l.depth(run.q)

	req := Request[T]{Key: key}
	obj, live := l.src.Get(key)
	l.mu.Lock()
	// This reconcile supersedes whatever an earlier one scheduled for the key.
	l.cancelRetryLocked(run, key)
	if !live {
		req.LastKnown = run.tombstones[key]
	}
	l.mu.Unlock()
	if live {
		req.Object = obj
		req.Namespace, req.Name = obj.GetNamespace(), obj.GetName()
	} else {
		req = deletion(key, req.LastKnown)
	}
	rctx := ctx
	if l.parts != nil {
		part, held := l.enter(run, req)
		if !held {
			return true
		}
		defer l.leave(run, key)
		select {
		case run.slots <- struct{}{}: // a HandOver may hold some
			defer func() { <-run.slots }()
		case <-part.Done():
			// Given up while it waited: as a reconcile its part's end interrupted. A
			// deletion keeps its last state for the HandOver, which waits for this key.
			l.forgetFailures(run, key)
			return true
		}
		var cancel context.CancelFunc
		rctx, cancel = context.WithCancel(part)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
	}

	logger := klog.FromContext(ctx).WithValues("loop", l.opts.Name, "key", key)
	start := time.Now()
	res, err := l.reconcile(klog.NewContext(l.withRecorder(rctx, run, key), logger), req)
	l.metrics.Call(ctx, "ReconcileLatency", func(m Metrics) { m.ReconcileLatency(l.opts.Name, time.Since(start)) })
	requeueIn, requeue := res.requeueIn(l.opts.Clock)
	if l.work.Set() {
		o := outcome(ctx, rctx, requeue, err)
		l.work.Call(ctx, "Reconciled", func(m WorkMetrics) { m.Reconciled(l.opts.Name, o) })
	}
	switch {
	case err != nil && !IsTerminal(err) && interrupted(ctx, err):
		// Cut short by the Loop stopping, which is routine: not a failure to report or
		// count. A deletion keeps its last state, for RunHandingOver's drain.
		logger.V(2).Info("Reconcile interrupted: the loop is stopping", "err", err)
	case err != nil && !IsTerminal(err) && interrupted(rctx, err):
		// Cut short by its part leaving: the part's next holder reconciles a live key,
		// and the part's HandOver a deletion, which keeps its last state for it.
		logger.V(2).Info("Reconcile interrupted: its part was handed over", "err", err)
		l.forgetFailures(run, key)
	case err == nil && requeue:
		// Still pending: a deletion keeps its last state for the requeued reconcile.
		l.forgetFailures(run, key)
		l.retryAfter(run, key, prio, requeueIn)
	case err == nil:
		l.done(run, key)
	case IsTerminal(err):
		l.done(run, key)
		l.report(ctx, logger, key, err, true)
	case l.opts.MaxRetries > 0 && run.limiter.NumRequeues(key) >= l.opts.MaxRetries:
		l.done(run, key)
		l.report(ctx, logger, key, fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, l.opts.MaxRetries+1, err), false)
	default:
		l.metrics.Call(ctx, "Retry", func(m Metrics) { m.Retry(l.opts.Name) })
		l.report(ctx, logger, key, err, false)
		l.mu.Lock()
		run.failing[key] = struct{}{}
		l.mu.Unlock()
		l.retryAfter(run, key, prio, run.limiter.When(key))
	}
	return true
}

// interrupted reports whether err, a reconcile's, says only that ctx, the Loop's, ended
// during the reconcile.
func interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// done forgets what the Loop kept for key once it is not going to be retried: its failure
// count, and the last state of its deletion unless an event queued the key again during
// the reconcile (that reconcile is still due). The key has no retry scheduled: this
// reconcile cancelled it, and only this worker schedules the key's retries.
func (l *Loop[T]) done(run *loopRun[T], key string) {
	l.forgetFailures(run, key)
	l.mu.Lock()
	if !run.q.Dirty(key) {
		delete(run.tombstones, key)
	}
	l.mu.Unlock()
}

// forgetFailures resets key's failure count.
func (l *Loop[T]) forgetFailures(run *loopRun[T], key string) {
	run.limiter.Forget(key)
	l.mu.Lock()
	delete(run.failing, key)
	l.mu.Unlock()
}

func (l *Loop[T]) reconcile(ctx context.Context, req Request[T]) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &controller.PanicError{Kind: "reconcile", Name: l.opts.Name, Key: req.Key, Value: v, Stack: debug.Stack()}
		}
	}()
	return l.r.Reconcile(ctx, req)
}

// report hands a reconcile error to Options.OnError, or logs it at error level when there
// is none, so that no error goes unseen and none is reported twice.
func (l *Loop[T]) report(ctx context.Context, logger klog.Logger, key string, err error, terminal bool) {
	l.metrics.Call(ctx, "ReconcileError", func(m Metrics) { m.ReconcileError(l.opts.Name, terminal) })
	if l.opts.OnError != nil {
		defer guard.LogPanic(logger, err, "reconcile error, whose OnError panicked")
		l.opts.OnError(ctx, key, err)
		return
	}
	var panicErr *controller.PanicError
	if errors.As(err, &panicErr) {
		logger.Error(err, "reconcile panicked", "stack", string(panicErr.Stack))
		return
	}
	logger.Error(err, "reconcile failed", "terminal", terminal)
}

// safeLimiter keeps a panicking Options.RateLimiter from ending the process: it is
// called on workers. A panic is logged and the default limiter answers instead.
type safeLimiter struct {
	l        workqueue.TypedRateLimiter[string]
	fallback workqueue.TypedRateLimiter[string]
	logger   klog.Logger
}

func (s safeLimiter) When(key string) time.Duration {
	return orFallback(s, "When", key, s.l.When, s.fallback.When)
}

func (s safeLimiter) NumRequeues(key string) int {
	return orFallback(s, "NumRequeues", key, s.l.NumRequeues, s.fallback.NumRequeues)
}

func (s safeLimiter) Forget(key string) {
	defer guard.LogPanic(s.logger, nil, "Options.RateLimiter.Forget panicked", "key", key)
	s.l.Forget(key)
}

// orFallback returns call(key), or, if it panics, logs the panic and returns
// fallback(key), the default limiter's answer.
func orFallback[R any](s safeLimiter, method, key string, call, fallback func(string) R) (r R) {
	defer func() {
		if v := recover(); v != nil {
			s.logger.Error(fmt.Errorf("panic: %v", v), "Options.RateLimiter panicked; the default rate limiter answers instead", "method", method, "key", key)
			r = fallback(key)
		}
	}()
	return call(key)
}

// deletion is the Request of key, deleted, whose last known state is last (nil when the
// cache never held it).
func deletion[T event.Object](key string, last T) Request[T] {
	req := Request[T]{Key: key, Deleted: true, LastKnown: last}
	var zero T
	if last != zero {
		req.Namespace, req.Name = last.GetNamespace(), last.GetName()
	} else {
		req.Namespace, req.Name = event.SplitKey(key)
	}
	return req
}
