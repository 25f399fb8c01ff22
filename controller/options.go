package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/queue"
	"github.com/typedinformer/typedinformer/reflect"
)

// Metrics receives a controller's counters and gauges. It has no dependency on any metrics
// library: adapt it to Prometheus or OpenTelemetry in a few lines. Implementations must be
// safe for concurrent use and cheap; they are called on the hot path.
type Metrics interface {
	reflect.Metrics
	// QueueDepth is called with the number of keys waiting in the event cache.
	QueueDepth(keys int)
	// HandlerLatency is called after each call of a handler.
	HandlerLatency(handler string, d time.Duration)
	// HandlerPanic is called for each panic recovered from a handler.
	HandlerPanic(handler string)
}

// Option configures a Controller. Options that depend on the object type (WithIndex,
// WithKeyFunc, WithTransform) infer it from their function argument; New panics if it
// does not match the controller's type, as that is a programming error.
type Option func(*config)

type config struct {
	name         string
	resync       time.Duration
	pageSize     int64
	watchList    bool
	backoff      wait.Backoff
	clock        clock.WithTicker
	tweak        func(*metav1.ListOptions)
	onError      func(context.Context, error)
	metrics      Metrics
	compression  queue.Compression
	keyFunc      any
	transform    any
	indexers     map[string]any
	indexerOrder []string
}

// reportError hands err to the error handler, or logs it when there is none, so that no
// error goes unseen and none is reported twice. Without a handler it logs as client-go's
// reflector does: routine list/watch protocol events (reflect.IsRoutine: a relist after
// 410 Gone, a short watch, a server restarting) at verbosity 2, so that they do not read
// as failures; everything else as an error, a handler panic with its stack.
func (c *config) reportError(ctx context.Context, err error) {
	logger := klog.FromContext(ctx)
	if c.onError != nil {
		logger.V(4).Info("controller error", "controller", c.name, "err", err)
		c.callErrorHandler(ctx, logger, err)
		return
	}
	var panicked *HandlerPanicError
	switch {
	case errors.As(err, &panicked):
		logger.Error(err, "handler panicked", "controller", c.name, "stack", string(panicked.Stack))
	case reflect.IsRoutine(err):
		logger.V(2).Info("list/watch protocol event, retrying", "controller", c.name, "err", err)
	default:
		logger.Error(err, "controller error", "controller", c.name)
	}
}

// callErrorHandler calls the error handler and recovers a panic in it: it runs on the
// reflector's, the consumer's and the handlers' goroutines, where a panic would end the
// process. The panic is logged as an error, with its stack and the error being handled.
func (c *config) callErrorHandler(ctx context.Context, logger klog.Logger, err error) {
	defer func() {
		if v := recover(); v != nil {
			logger.Error(fmt.Errorf("%v", v), "error handler panicked", "controller", c.name, "handling", err.Error(), "stack", string(debug.Stack()))
		}
	}()
	c.onError(ctx, err)
}

// WithName names the controller in logs and errors.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithResyncPeriod makes the controller redeliver every known object that has nothing
// pending, as a synchronization modification, every d. Zero (the default) turns it off.
func WithResyncPeriod(d time.Duration) Option { return func(c *config) { c.resync = d } }

// WithPageSize sets the list page size (default 500).
func WithPageSize(n int64) Option { return func(c *config) { c.pageSize = n } }

// WithWatchList turns on the streaming watch-list protocol for the initial state, with a
// fall back to a paged list on servers that reject it.
func WithWatchList(on bool) Option { return func(c *config) { c.watchList = on } }

// WithBackoff sets the backoff between failed list or watch attempts (default
// reflect.DefaultBackoff).
func WithBackoff(b wait.Backoff) Option { return func(c *config) { c.backoff = b } }

// WithClock sets the clock of backoff and resync timers, for tests.
func WithClock(clk clock.WithTicker) Option { return func(c *config) { c.clock = clk } }

// WithListOptions adjusts the options of every list and watch request, for example to
// set a label or field selector.
func WithListOptions(tweak func(*metav1.ListOptions)) Option {
	return func(c *config) { c.tweak = tweak }
}

// WithErrorHandler receives every error the controller reports: list and watch failures,
// watch ERROR events, objects of the wrong type, with no name or that the ListerWatcher
// could not read (reflect.ErrIncompleteList, reflect.Unreadable), index errors and
// recovered handler panics (as *HandlerPanicError). Routine protocol events, such as
// 410 Gone before a relist, are among them; reflect.IsRoutine tells them apart. Without
// a handler, errors are logged: routine ones at verbosity 2, the others as errors. It
// must not block; a panic in it is recovered and logged as an error.
func WithErrorHandler(fn func(ctx context.Context, err error)) Option {
	return func(c *config) { c.onError = fn }
}

// WithMetrics sends the controller's counters and gauges to m.
func WithMetrics(m Metrics) Option { return func(c *config) { c.metrics = m } }

// WithFullHistory keeps every intermediate state of an object instead of merging pending
// modifications, for handlers that must see each one. Memory then grows with the number
// of events, not keys, while a consumer or handler is behind.
func WithFullHistory() Option { return func(c *config) { c.compression = queue.FullHistory } }

// WithKeyFunc replaces the default key function (event.ObjectKey).
func WithKeyFunc[T event.Object](fn event.KeyFunc[T]) Option {
	return func(c *config) { c.keyFunc = fn }
}

// WithTransform applies fn to every object before it is cached, for example
// typed.StripManagedFields to save memory.
func WithTransform[T event.Object](fn func(T) (T, error)) Option {
	return func(c *config) { c.transform = fn }
}

// WithIndex adds a secondary index to the known objects, queried with Store().ByIndex.
// Every controller also has eventcache.NamespaceIndex.
func WithIndex[T event.Object](name string, fn eventcache.IndexFunc[T]) Option {
	return func(c *config) {
		if c.indexers == nil {
			c.indexers = map[string]any{}
		}
		if _, ok := c.indexers[name]; !ok {
			c.indexerOrder = append(c.indexerOrder, name)
		}
		c.indexers[name] = fn
	}
}

// typed converts an option's value to the controller's type, panicking with a clear
// message on a mismatch.
func typed[V any](what string, v any) V {
	out, ok := v.(V)
	if !ok {
		var want V
		panic(fmt.Sprintf("controller: %s has type %T, the controller needs %T", what, v, want))
	}
	return out
}
