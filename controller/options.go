package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/queue"
	"github.com/typedinformer/typedinformer/reflect"
)

// Metrics receives a controller's counters and gauges, its reflector's included. Every
// method carries the controller's name (Options.Name), so that one sink serves many
// controllers, and no method name is used by another interface of the family
// (typed.Metrics, shard.Metrics): one type can implement them all, and be given once to a
// Manager (manager.Metrics). It has no dependency on any metrics library: adapt it to
// Prometheus or OpenTelemetry in a few lines. Implementations must be safe for concurrent
// use and cheap; they are called on the hot path.
type Metrics interface {
	reflect.Metrics
	// EventQueueDepth is called with the number of keys waiting in the event cache.
	EventQueueDepth(controller string, keys int)
	// HandlerLatency is called after each call of a handler.
	HandlerLatency(controller, handler string, d time.Duration)
	// HandlerPanic is called for each panic recovered from a handler.
	HandlerPanic(controller, handler string)
}

// Options configure a Controller of T. The zero value is right for production: every
// field is optional, and its zero value means the default its comment names.
//
// The list/watch settings are the embedded reflect.Options, stated once there: Name,
// ResyncPeriod, PageSize, WatchList, Backoff, Clock, Transform, ListOptions and OnError.
// A controller's OnError receives, besides the reflector's errors, index errors,
// recovered handler panics (as *PanicError) and the mutations the detector finds. Its
// Metrics is the field of Options below, not the reflector's: reflect.Options.Metrics
// must be left nil (New refuses it), since Metrics receives the reflector's counters too.
type Options[T event.Object] struct {
	reflect.Options[T]
	// Metrics, when set, receives the controller's counters and gauges, the reflector's
	// included; a typed-nil one is none. A panic in it is recovered and logged as an
	// error.
	Metrics Metrics
	// FullHistory keeps every intermediate state of an object instead of merging pending
	// modifications, for handlers that must see each one. Memory then grows with the
	// number of events, not keys, while a consumer or handler is behind.
	FullHistory bool
	// KeyFunc computes the key of an object; event.ObjectKey when nil. An object it
	// fails or panics on is reported and skipped.
	KeyFunc event.KeyFunc[T]
	// Indexers are secondary indexes of the known objects, by name, queried with
	// Store().ByIndex. Every controller also has eventcache.NamespaceIndex. An object an
	// index function fails or panics on is left out of that index and reported.
	Indexers eventcache.Indexers[T]
	// DetectMutations turns on the mutation detector, for tests: the cache keeps a
	// snapshot of every object (its JSON encoding, so that a hand-written DeepCopyObject
	// that copies only the top level hides nothing; see eventcache.Writer.DetectMutations)
	// and finds objects that handlers, reconcilers or readers changed in place, which they
	// must never do (cached objects are shared and read-only). Each one is reported as an
	// *eventcache.MutationError with its key and a go-cmp diff, through OnError and
	// OnMutation: when the object is next updated or deleted, or, for the objects still
	// changed when Run ends, by the check Run then makes of every object. Run returns them
	// all. An object that does not encode as JSON is watched through its DeepCopyObject
	// instead, and the first one is reported through OnError. The environment variable TYPEDINFORMER_CACHE_MUTATION_DETECTOR=true turns it on
	// for every controller of a test binary, as client-go's KUBE_CACHE_MUTATION_DETECTOR
	// does. It keeps the objects' encodings and encodes every written object: leave it off
	// in production.
	DetectMutations bool
	// OnMutation, when set, is called with each cached object the mutation detector finds
	// changed in place, once, as it is found: on the consumer's goroutine after the write
	// that found it, or in Run, after every handler has returned, for those found by its
	// final check. It lets a test fail at once, with the key and the diff, where Run's
	// error does not reach it (a controller run by a Manager). Nothing is locked while it
	// runs; it must not block, and a panic in it is recovered and logged as an error
	// through ctx's logger (klog.FromContext). It is called only while the detector is on
	// (DetectMutations or the environment variable): setting it does not turn the
	// detector on. The errors OnError receives include the same mutations.
	OnMutation func(ctx context.Context, m *eventcache.MutationError)
}

// MutationDetectorEnv is the environment variable that, set to "true", turns on
// Options.DetectMutations for every controller.
const MutationDetectorEnv = "TYPEDINFORMER_CACHE_MUTATION_DETECTOR"

// check returns what New refuses in o: index functions that are missing or take the
// built-in index's name, and metrics given to the reflector alone, which would bypass
// the controller's.
func (o *Options[T]) check() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(o.Indexers)) {
		switch {
		case o.Indexers[name] == nil:
			errs = append(errs, fmt.Errorf("index %q: %w", name, eventcache.ErrNilIndexFunc))
		case name == eventcache.NamespaceIndex:
			errs = append(errs, fmt.Errorf("%w: %q is the built-in namespace index; give yours another name", eventcache.ErrIndexExists, name))
		}
	}
	if !guard.IsNil(o.Options.Metrics) {
		errs = append(errs, fmt.Errorf("%w: reflect.Options.Metrics is set; set Options.Metrics, which receives the reflector's metrics too", ErrInvalidOptions))
	}
	return errors.Join(errs...)
}

// config is what the handlers' goroutines need of the options, without the object type.
type config struct {
	name        string
	onError     func(context.Context, error)
	metrics     guard.Metrics[Metrics]
	compression queue.Compression
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
	var panicked *PanicError
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
	defer guard.LogPanic(logger, nil, "error handler panicked", "controller", c.name, "handling", err.Error())
	c.onError(ctx, err)
}
