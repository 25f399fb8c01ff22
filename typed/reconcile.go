package typed

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/reflect"
)

// Request is what a reconciler is asked to make right: one key, with the freshest state
// the cache holds for it.
type Request[T event.Object] struct {
	// Key is the object's cache key; Namespace ("" for cluster-scoped objects) and Name
	// are its parts.
	Key       string
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

type terminalError struct{ err error }

func (e terminalError) Error() string { return "terminal: " + e.err.Error() }
func (e terminalError) Unwrap() error { return e.err }

// Terminal marks err as not worth retrying: the key is dropped until its next event.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return terminalError{err}
}

// IsTerminal reports whether err was marked with Terminal.
func IsTerminal(err error) bool {
	var t terminalError
	return errors.As(err, &t)
}

// ErrRetriesExhausted is reported, wrapped with the last error, when a key has failed
// Options.MaxRetries times in a row; the key is then dropped until its next event.
var ErrRetriesExhausted = errors.New("retries exhausted")

// ReconcilePanicError reports a panic recovered from a Reconciler. The key is retried
// like any other error.
type ReconcilePanicError struct {
	// Key is the key being reconciled.
	Key string
	// Value is what the reconciler panicked with.
	Value any
	// Stack is the reconciler's goroutine stack at the panic.
	Stack []byte
}

// Error describes the panic and its key.
func (e *ReconcilePanicError) Error() string {
	return fmt.Sprintf("reconcile of %s panicked: %v", e.Key, e.Value)
}

// Metrics receives a Loop's counters and gauges. Implementations must be safe for
// concurrent use.
type Metrics interface {
	// QueueDepth is called with the number of keys waiting.
	QueueDepth(loop string, depth int)
	// Retry is called each time a key is put back after an error.
	Retry(loop string)
	// ReconcileLatency is called after each reconcile.
	ReconcileLatency(loop string, d time.Duration)
	// ReconcileError is called for each reconcile that returned an error.
	ReconcileError(loop string, terminal bool)
}

// Options configure a Loop. The zero value is usable.
type Options struct {
	// Name identifies the loop in logs and metrics; the object type by default.
	Name string
	// Workers is how many keys are reconciled at once; 1 when zero.
	Workers int
	// MaxRetries is how many times in a row a failing key is retried before it is dropped
	// until its next event; 10 when zero, no limit when negative.
	MaxRetries int
	// RateLimiter spaces out retries; workqueue.DefaultTypedControllerRateLimiter when nil.
	RateLimiter workqueue.TypedRateLimiter[string]
	// OnError receives every reconcile error, including recovered panics and
	// ErrRetriesExhausted. It must not block.
	OnError func(ctx context.Context, key string, err error)
	// Metrics receives counters and gauges; none when nil.
	Metrics Metrics
}

// Loop reconciles the keys of one Controller with a Reconciler, on client-go's typed
// rate-limited workqueue. Create it with NewLoop, run the Controller, and run the Loop;
// Run can be called again after it returns (for example each time leadership is won).
type Loop[T event.Object, L reflect.List] struct {
	c       *controller.Controller[T, L]
	r       Reconciler[T]
	opts    Options
	related []func(enqueue func(key string)) (*controller.Registration, error)

	mu         sync.Mutex
	tombstones map[string]T // last state of deleted keys not yet reconciled
}

// NewLoop returns a Loop that reconciles c's keys with r.
func NewLoop[T event.Object, L reflect.List](c *controller.Controller[T, L], r Reconciler[T], opts Options) *Loop[T, L] {
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 10
	}
	if opts.Name == "" {
		var zero T
		opts.Name = fmt.Sprintf("%T", zero)
	}
	return &Loop[T, L]{c: c, r: r, opts: opts, tombstones: map[string]T{}}
}

// Run reconciles until ctx is done: it registers its handlers (the controller's, and those
// of Related sources), waits until each has the initial state of its controller, and runs
// Options.Workers workers.
// When ctx ends it stops taking new keys, lets in-flight reconciles finish, unregisters
// its handlers and returns with none of its goroutines left. Every key the controller
// knows is reconciled once after Run starts.
func (l *Loop[T, L]) Run(ctx context.Context) error {
	rateLimiter := l.opts.RateLimiter
	if rateLimiter == nil {
		rateLimiter = workqueue.DefaultTypedControllerRateLimiter[string]()
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(rateLimiter, workqueue.TypedRateLimitingQueueConfig[string]{})
	enqueue := func(key string) {
		q.Add(key)
		l.depth(q)
	}

	reg, err := l.c.AddHandler(l.opts.Name, controller.HandlerFunc[T](func(_ context.Context, e event.Event[T]) {
		key, err := event.ObjectKey(e.Object)
		if err != nil {
			return // the controller only delivers keyed objects
		}
		l.mu.Lock()
		if e.Type == event.Deleted {
			l.tombstones[key] = e.Object
		} else {
			delete(l.tombstones, key)
		}
		l.mu.Unlock()
		enqueue(key)
	}))
	if err != nil {
		q.ShutDown()
		return err
	}
	regs := []*controller.Registration{reg}
	defer func() {
		for _, reg := range regs {
			reg.Remove()
		}
	}()
	for _, add := range l.related {
		reg, err := add(enqueue)
		if err != nil {
			q.ShutDown()
			return err
		}
		regs = append(regs, reg)
	}

	// Reconcilers must not act on a partial view of the cluster: wait until every source
	// has delivered its initial state.
	for _, reg := range regs {
		select {
		case <-reg.Synced():
		case <-ctx.Done():
			q.ShutDown()
			return nil
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < l.opts.Workers; i++ {
		wg.Go(func() {
			for l.next(ctx, q) {
			}
		})
	}
	<-ctx.Done()
	q.ShutDownWithDrain()
	wg.Wait()
	// ShutDownWithDrain stops only the inner queue; ShutDown also ends the delaying
	// queue's goroutine.
	q.ShutDown()
	return nil
}

func (l *Loop[T, L]) depth(q workqueue.TypedRateLimitingInterface[string]) {
	if l.opts.Metrics != nil {
		l.opts.Metrics.QueueDepth(l.opts.Name, q.Len())
	}
}

// next reconciles one key; it returns false once the queue has shut down.
func (l *Loop[T, L]) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	if ctx.Err() != nil {
		return false // the workqueue hands out queued keys after shutdown; start none
	}
	l.depth(q)

	req := Request[T]{Key: key}
	req.Namespace, req.Name = event.SplitKey(key)
	if obj, ok := l.c.Store().Get(key); ok {
		req.Object = obj
	} else {
		req.Deleted = true
		l.mu.Lock()
		req.LastKnown = l.tombstones[key]
		l.mu.Unlock()
	}

	start := time.Now()
	res, err := l.reconcile(ctx, req)
	if l.opts.Metrics != nil {
		l.opts.Metrics.ReconcileLatency(l.opts.Name, time.Since(start))
	}
	logger := klog.FromContext(ctx).WithValues("loop", l.opts.Name, "key", key)
	switch {
	case err == nil:
		q.Forget(key)
		if req.Deleted {
			l.forgetTombstone(key)
		}
		if res.RequeueAfter > 0 {
			q.AddAfter(key, res.RequeueAfter)
		}
	case IsTerminal(err):
		q.Forget(key)
		l.report(ctx, key, err, true)
	case l.opts.MaxRetries > 0 && q.NumRequeues(key) >= l.opts.MaxRetries:
		q.Forget(key)
		l.report(ctx, key, fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, l.opts.MaxRetries+1, err), false)
	default:
		logger.V(4).Info("reconcile failed, retrying", "err", err)
		if l.opts.Metrics != nil {
			l.opts.Metrics.Retry(l.opts.Name)
		}
		l.report(ctx, key, err, false)
		q.AddRateLimited(key)
	}
	return true
}

// forgetTombstone drops a deleted key's last state once it has been reconciled, unless
// the object came back meanwhile.
func (l *Loop[T, L]) forgetTombstone(key string) {
	if _, ok := l.c.Store().Get(key); ok {
		return
	}
	l.mu.Lock()
	delete(l.tombstones, key)
	l.mu.Unlock()
}

func (l *Loop[T, L]) reconcile(ctx context.Context, req Request[T]) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &ReconcilePanicError{Key: req.Key, Value: v, Stack: debug.Stack()}
		}
	}()
	return l.r.Reconcile(ctx, req)
}

func (l *Loop[T, L]) report(ctx context.Context, key string, err error, terminal bool) {
	if l.opts.Metrics != nil {
		l.opts.Metrics.ReconcileError(l.opts.Name, terminal)
	}
	klog.FromContext(ctx).V(2).Info("reconcile error", "loop", l.opts.Name, "key", key, "err", err)
	if l.opts.OnError != nil {
		l.opts.OnError(ctx, key, err)
	}
}
