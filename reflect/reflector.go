// Package reflect holds the Reflector: the stage that lists and watches a ListerWatcher and
// writes what it sees into an EventCache.
//
// The protocol, as client-go's reflector and kube-rs' watcher run it:
//
//   - List (paged), then Replace the cache with the result, then watch from the list's
//     resource version with bookmarks. With Options.WatchList, the list is instead a
//     streaming watch-list request (sendInitialEvents) on servers that offer it, with a
//     fall back to a paged list on servers that reject it, for a ListerWatcher that says
//     it cannot serve it (WatchListUnsupported: client-go's fakes), and after a stream
//     whose initial events stall (ErrWatchListStalled).
//   - When a watch ends, watch again from the last resource version seen, without a
//     relist. When the server answers 410 Gone or "resource version too old", or says the
//     version is newer than it has ("too large resource version", as a server that lags
//     behind another one does), relist with a consistent read, as client-go does: watching
//     from the same version again would fail the same way forever.
//   - On errors, wait with client-go's wait.Backoff (exponential, with jitter, capped)
//     before the next attempt. A cycle that received watch events, or whose watch ran its
//     course, resets the backoff, so a healthy watch that times out is resumed at once
//     while a failing server is not hammered. A watch that ends with no event is an error
//     (ErrShortWatch) only when it lasted less than a second on the reflector's clock
//     (client-go's "very short watch"): that is a server closing watches at once, to be
//     retried with backoff rather than in a hot loop. A longer quiet watch is the server's
//     ordinary timeout: it is resumed at once and logged only at verbosity 4, not reported.
//   - A watch ERROR event becomes an error wrapping the server's *apierrors.StatusError
//     (sent as a *metav1.Status, or as an Unstructured Status by the dynamic client), so
//     errors.As and apierrors.IsGone and friends work on it.
//   - A list item or watched object of the wrong type, a nil or typed-nil one, an
//     Unreadable, a nil result of Options.Transform or an object the cache rejects (one
//     with no name) is reported through Options.OnError and counted, and the rest of the
//     list or stream is processed: it never panics and never drops an object silently.
//   - A list from which anything could not be read (such an item, or a List that returns
//     its list with an error wrapping ErrIncompleteList) replaces the cache as
//     eventcache.IncompleteList: what is missing from it is not deleted, since it may be
//     a live object that could not be read (DESIGN 18). A watched object that cannot be
//     read keeps its cached state, except in a DELETED event: the server said it is gone,
//     so its deletion is recorded, final-state-unknown, with the last known state
//     (DESIGN 15), keyed by the metadata that can be read.
//   - A ListerWatcher that returns nil and no error from List or Watch (ErrNilResult), a
//     watch with no result channel, a nil or typed-nil ERROR status or bookmark object:
//     every input at this boundary is a reported error, never a panic, and a failed list
//     or watch is retried with backoff like any other.
//
// Errors go to Options.OnError; without one they are logged, routine protocol events
// (IsRoutine) at verbosity 2 and the rest as errors.
//
// The reflector never waits for handlers: the EventCache operations it calls do not
// block on consumers.
package reflect

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goreflect "reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/pager"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/guard"
)

// minWatchDuration is how long a watch must last for its quiet end to count as the
// server's ordinary timeout rather than a failure; client-go uses the same second.
const minWatchDuration = time.Second

// probeTimeout is the timeout of the watch RequestProgress opens beside the reflector's
// own: short enough that kube-apiserver's watch cache sends its bookmark (2 s before a
// watch's deadline) about a second later.
const probeTimeout = 3 * time.Second

// errRelistRequested ends a watch for RequestRelist; it is not reported.
var errRelistRequested = errors.New("relist requested")

// DefaultBackoff is the backoff used when Options.Backoff is zero: 800ms doubling with
// full jitter up to 30s, as client-go's reflector does.
var DefaultBackoff = wait.Backoff{Duration: 800 * time.Millisecond, Factor: 2, Jitter: 1, Steps: 1 << 30, Cap: 30 * time.Second}

// Metrics receives the reflector's counters and gauges. Every method carries the
// reflector's name (Options.Name; a controller's), so that one sink serves many
// reflectors, and no method name is used by another interface of the family
// (controller.Metrics, typed.Metrics, shard.Metrics): one type can implement them all.
// Implementations must be safe for concurrent use and fast: they are called on the hot
// path.
type Metrics interface {
	// Listed is called after each list (or watch-list) that replaced the cache.
	Listed(reflector string, items int, d time.Duration)
	// WatchEvent is called for every watch event received, of any type.
	WatchEvent(reflector string, t watch.EventType)
	// ResourceVersion is called with the newest resource version seen.
	ResourceVersion(reflector string, rv string)
	// ListWatchError is called for every error reported through Options.OnError.
	ListWatchError(reflector string)
}

// Options configure a Reflector: what it lists and watches, and how. The zero value is
// right for production: every field is optional, and its zero value means the default its
// comment names. controller.Options embeds it, so that a Controller's list/watch settings
// are these, stated once.
type Options[T event.Object] struct {
	// Name names the reflector (and a controller) in logs, errors and metrics; the object
	// type (as %T prints it) by default.
	Name string
	// ResyncPeriod, when positive, makes the cache Synchronize that often: every known
	// object that has nothing pending is redelivered as a synchronization modification.
	// Zero turns it off.
	ResyncPeriod time.Duration
	// PageSize is the list page size; 500 when zero.
	PageSize int64
	// WatchList turns on the streaming watch-list protocol for the initial state and
	// every relist: the objects come as watch events, decoded one at a time, instead of
	// list pages held whole, so that a sync's peak memory is the cache's. It falls back
	// to paged lists, for good, on a server that rejects it, for a ListerWatcher that
	// says it cannot serve it (WatchListUnsupported), and after a stream that stalled
	// (ErrWatchListStalled, reported). It is off by default here and in
	// controller.Options: a Reflector takes any ListerWatcher, often one written by hand
	// over something that accepts a watch-list request and never ends its initial
	// events, which it could then tell only after WatchListStall, a delay on every
	// start. The Manager builds its caches' ListerWatchers from clients it can ask
	// (WatchListUnsupported), so there it is on by default (typed/manager's
	// Options.NoWatchList turns it off).
	WatchList bool
	// Backoff is the backoff between failed list or watch attempts; DefaultBackoff when
	// zero.
	Backoff wait.Backoff
	// Clock drives backoff and resync timers, for tests; the real clock when nil (a
	// typed-nil one included).
	Clock clock.WithTicker
	// Transform, when set, is applied to every object before it enters the cache, for
	// example client.StripManagedFields to save memory. An object it fails on, or returns
	// nil for, is reported and skipped: a list it is in is incomplete (nothing is
	// deleted), and a watched deletion of it is still recorded, with the last known
	// state. A panic in it is such a failure (ErrCallbackPanicked).
	Transform func(T) (T, error)
	// ListOptions, when set, adjusts the options of every list and watch request, for
	// example to set a label or field selector (client.Selectors). A panic in it fails the
	// request, which is reported and retried (ErrCallbackPanicked).
	ListOptions func(*metav1.ListOptions)
	// OnError receives every error reported: list and watch failures, watch ERROR events,
	// objects of the wrong type, with no name or that the ListerWatcher could not read
	// (ErrIncompleteList, Unreadable); a controller adds its own (see
	// controller.Options). Routine protocol events, such as 410 Gone before a relist, are
	// among them; IsRoutine tells them apart. When nil, errors are logged: routine ones at
	// verbosity 2, the others as errors. It must not block; a panic in it is recovered and
	// logged as an error.
	OnError func(ctx context.Context, err error)
	// Metrics, when set, receives the reflector's counters and gauges; a typed-nil one is
	// none. A panic in it is recovered and logged as an error. A controller's is
	// controller.Options.Metrics, which receives these too: leave this one nil there.
	Metrics Metrics
}

// Reflector lists and watches a ListerWatcher[T, L] and writes what it sees into an
// EventCache[T].
type Reflector[T event.Object, L List] struct {
	lw    ListerWatcher[T, L]
	cache eventcache.EventCache[T]
	opts  Options[T]
	clock clock.WithTicker
	// stallClock times WatchListStall: a server's silence is real time, whatever clock
	// drives the backoff (Options.Clock), so that a test stepping that clock quickly does
	// not make a server that is answering look silent. Tests of the stall replace it.
	stallClock clock.WithTicker
	metrics    guard.Metrics[Metrics]

	mu sync.Mutex
	// lastRV is the newest resource version seen; "" before the first list.
	lastRV string
	// relist forces the next cycle to list, after 410 Gone.
	relist bool
	// watchListUnsupported is set once the ListerWatcher has said it cannot serve
	// watch-list (WatchListUnsupported), or has rejected or stalled a watch-list request.
	watchListUnsupported bool
	// watchListAsked is set once WatchListUnsupported has been asked.
	watchListAsked bool
	// The requests to the watch loop: each is set first, then control is poked (see
	// poke), and the loop reads them once it takes the poke. Waiting for events and one
	// control channel costs the loop, which waits once per event when the watch is not
	// busy, much less than waiting on a channel per request.
	control chan struct{}
	// progressAsked asks for a bookmark (see RequestProgress); relistAsked for a
	// consistent relist (see RequestRelist). Requests made while one is pending are one.
	progressAsked, relistAsked atomic.Bool
	// probed is a probe's finding, not yet taken by the watch loop, which alone keeps it
	// in found until its own watch has caught up with it. Guarded by mu.
	probed  *probe
	found   *probe
	probing bool // guarded by mu
	probes  sync.WaitGroup
}

// New returns a Reflector that feeds cache from lw.
func New[T event.Object, L List](lw ListerWatcher[T, L], cache eventcache.EventCache[T], opts Options[T]) *Reflector[T, L] {
	r := &Reflector[T, L]{lw: lw, cache: cache, opts: opts, clock: opts.Clock, stallClock: clock.RealClock{}, control: make(chan struct{}, 1)}
	if guard.IsNil(r.clock) { // a typed-nil Clock is none, as a nil one is
		r.clock = clock.RealClock{}
	}
	if r.opts.Backoff == (wait.Backoff{}) {
		r.opts.Backoff = DefaultBackoff
	}
	if r.opts.PageSize == 0 {
		r.opts.PageSize = 500
	}
	if r.opts.Name == "" {
		var zero T
		r.opts.Name = fmt.Sprintf("%T", zero)
	}
	r.metrics = guard.NewMetrics(r.opts.Metrics, "reflector", r.opts.Name)
	return r
}

// LastSyncResourceVersion returns the newest resource version the reflector has seen, ""
// before the first list.
func (r *Reflector[T, L]) LastSyncResourceVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastRV
}

// RequestProgress asks the reflector to make its cache catch up with the server although
// nothing it watches changes. Its own watch goes on: ending it would make whatever a slow
// connection still holds of it come again, a whole lag later, on the next one. Instead a
// second watch, from the newest version the reflector has seen and with a timeout of
// probeTimeout, waits for the bookmark kube-apiserver's watch cache sends about 2 s
// before the timeout; the cache reaches the bookmark's version (see
// eventcache.Bookmarker) once the reflector's own watch has brought every event the
// second one showed before it. Requests made while one is pending are one; it never
// blocks.
func (r *Reflector[T, L]) RequestProgress() {
	r.progressAsked.Store(true)
	r.poke()
}

// poke tells the watch loop that a request is set; it never blocks. A poke already
// pending covers this one: the loop reads every request once it takes it.
func (r *Reflector[T, L]) poke() {
	select {
	case r.control <- struct{}{}:
	default:
	}
}

// Selects reports whether obj, in the state given, is one the reflector's selectors
// (Options.ListOptions' label and field selectors) let through: a cache that does not
// hold an object and does not select it has nothing to apply from a write of it. It
// answers true when it cannot tell (a selector it cannot parse, a field other than
// metadata.name and metadata.namespace).
func (r *Reflector[T, L]) Selects(obj metav1.Object) bool {
	opts, err := r.listOptions(metav1.ListOptions{})
	if err != nil {
		return true
	}
	if opts.LabelSelector != "" {
		sel, err := labels.Parse(opts.LabelSelector)
		if err == nil && !sel.Matches(labels.Set(obj.GetLabels())) {
			return false
		}
	}
	if opts.FieldSelector != "" {
		sel, err := fields.ParseSelector(opts.FieldSelector)
		if err != nil {
			return true
		}
		for _, req := range sel.Requirements() {
			if req.Field != "metadata.name" && req.Field != "metadata.namespace" {
				return true
			}
		}
		return sel.Matches(fields.Set{"metadata.name": obj.GetName(), "metadata.namespace": obj.GetNamespace()})
	}
	return true
}

// ConsistentRV returns the resource version of a consistent read of the source, now: a
// list of at most one object, with the reflector's selectors and permissions. Every write
// committed before the call is at or below it.
func (r *Reflector[T, L]) ConsistentRV(ctx context.Context) (string, error) {
	opts, err := r.listOptions(metav1.ListOptions{ResourceVersion: "", Limit: 1})
	if err != nil {
		return "", err
	}
	l, err := callLW("List", func() (L, error) { return r.lw.List(ctx, opts) })
	if err != nil && !errors.Is(err, ErrIncompleteList) {
		return "", listError{err} // IsResourceNotServed tells a resource no longer served
	}
	if guard.IsNil(l) {
		return "", fmt.Errorf("%w: List returned %#v", ErrNilResult, l)
	}
	acc, err := meta.ListAccessor(l)
	if err != nil {
		return "", err
	}
	return acc.GetResourceVersion(), nil
}

// RequestRelist asks the reflector to list again, consistently, and to watch on from
// there: the cache then holds everything up to that list's resource version, whatever
// bookmarks the server sends or not. It costs a list of every object, so it is what a
// cache waiting to catch up falls back on when asking for bookmarks did not do. Requests
// made while one is pending are one; it never blocks.
func (r *Reflector[T, L]) RequestRelist() {
	r.relistAsked.Store(true)
	r.poke()
}

func (r *Reflector[T, L]) setRV(ctx context.Context, rv string) {
	if rv == "" {
		return
	}
	r.mu.Lock()
	r.lastRV = rv
	r.mu.Unlock()
	r.metrics.Call(ctx, "ResourceVersion", func(m Metrics) { m.ResourceVersion(r.opts.Name, rv) })
}

// report counts err and hands it to Options.OnError, or, without one, logs it at the
// level IsRoutine says, so that no error goes unseen and none is logged twice.
func (r *Reflector[T, L]) report(ctx context.Context, err error) {
	r.metrics.Call(ctx, "ListWatchError", func(m Metrics) { m.ListWatchError(r.opts.Name) })
	if r.opts.OnError != nil {
		defer guard.LogPanic(klog.FromContext(ctx), err, "OnError panicked", "reflector", r.opts.Name)
		r.opts.OnError(ctx, err)
		return
	}
	logger := klog.FromContext(ctx)
	if IsRoutine(err) {
		logger.V(2).Info("reflector: routine list/watch event", "reflector", r.opts.Name, "err", err)
		return
	}
	logger.Error(err, "reflector error", "reflector", r.opts.Name)
}

// Run lists and watches until ctx is done, backing off after failures. Every failure is
// reported through Options.OnError. It returns when ctx is done, having stopped every
// watch it opened.
func (r *Reflector[T, L]) Run(ctx context.Context) {
	defer r.probes.Wait()
	backoff := r.opts.Backoff
	unavailableBefore := false
	for ctx.Err() == nil {
		progressed, err := r.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.report(ctx, fmt.Errorf("%s: %w", r.opts.Name, err))
		}
		if progressed {
			backoff = r.opts.Backoff
		}
		// 410 Gone and "too large resource version" are the protocol asking for a relist,
		// not a failure: relist at once, unless the previous attempt ended the same way.
		unavailable := isRVUnavailable(err)
		if unavailable && !unavailableBefore {
			unavailableBefore = true
			continue
		}
		unavailableBefore = unavailable
		t := r.clock.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// isRVUnavailable reports whether err says that the server cannot serve the requested
// resource version, because it was compacted away or because the server has not reached
// it; either way only a relist with a consistent read gets the reflector going again.
func isRVUnavailable(err error) bool {
	return err != nil && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || isTooLargeRV(err))
}

// isTooLargeRV is client-go's isTooLargeResourceVersionError: servers since 1.18.6 say it
// with a status cause, older ones only in the message of a Timeout status.
func isTooLargeRV(err error) bool {
	if apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return true
	}
	var status apierrors.APIStatus
	return apierrors.IsTimeout(err) && errors.As(err, &status) && strings.Contains(status.Status().Message, "Too large resource version")
}

// ListAndWatch runs one cycle: a list if one is needed, then watches until a watch fails
// or ctx is done. It returns nil only when ctx is done.
func (r *Reflector[T, L]) ListAndWatch(ctx context.Context) error {
	_, err := r.listAndWatch(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (r *Reflector[T, L]) needsList() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.relist || r.lastRV == ""
}

// listAndWatch reports whether the cycle made progress: whether a watch delivered events
// or ran its course.
func (r *Reflector[T, L]) listAndWatch(ctx context.Context) (progressed bool, err error) {
	start := r.clock.Now() // of the watch; for a watch-list, of the list it continues
	var w watch.Interface
	var events <-chan watch.Event
	if r.needsList() {
		w, events, err = r.list(ctx)
		if err != nil {
			return false, err
		}
	}
	var resync <-chan time.Time
	if r.opts.ResyncPeriod > 0 {
		t := r.clock.NewTicker(r.opts.ResyncPeriod)
		defer t.Stop()
		resync = t.C()
	}
	for {
		if w == nil {
			start = r.clock.Now()
			w, events, err = r.watch(ctx, metav1.ListOptions{
				ResourceVersion:     r.LastSyncResourceVersion(),
				AllowWatchBookmarks: true,
				TimeoutSeconds:      watchTimeout(),
			})
			if err != nil {
				return progressed, r.classify(fmt.Errorf("watch: %w", err))
			}
		}
		n, err := r.handleWatch(ctx, events, resync)
		w.Stop()
		w = nil
		progressed = progressed || n > 0
		switch lasted := r.clock.Since(start); {
		case errors.Is(err, errRelistRequested):
			klog.FromContext(ctx).V(2).Info("listing again, as asked", "reflector", r.opts.Name)
			r.mu.Lock()
			r.relist = true // a consistent read
			r.mu.Unlock()
			if w, events, err = r.list(ctx); err != nil {
				return progressed, err
			}
			continue
		case err != nil:
			return progressed, r.classify(err)
		case n > 0:
		case lasted < minWatchDuration:
			return progressed, fmt.Errorf("%w after %v", ErrShortWatch, lasted)
		default:
			klog.FromContext(ctx).V(4).Info("watch ended without events, resuming", "reflector", r.opts.Name, "duration", lasted)
			progressed = true
		}
	}
}

// classify marks the reflector for a relist when err says the resource version is
// unavailable, or that the resource is not found.
func (r *Reflector[T, L]) classify(err error) error {
	// A resource that is no longer served (a deleted CRD) answers a watch with 404 Not
	// Found for as long as it is gone: only a list says so for good (IsResourceNotServed)
	// and finds the objects again once it is back.
	if isRVUnavailable(err) || apierrors.IsNotFound(err) {
		r.mu.Lock()
		r.relist = true
		r.mu.Unlock()
	}
	return err
}

// listOptions returns opts adjusted by Options.ListOptions, or an error wrapping
// ErrCallbackPanicked if it panics: the request is then not made, and fails as a request
// does.
func (r *Reflector[T, L]) listOptions(opts metav1.ListOptions) (_ metav1.ListOptions, err error) {
	if r.opts.ListOptions == nil {
		return opts, nil
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: ListOptions: %v\n%s", ErrCallbackPanicked, v, debug.Stack())
		}
	}()
	r.opts.ListOptions(&opts)
	return opts, nil
}

// watch opens a watch with opts (tweaked) and returns it with its result channel. A nil
// watch or result channel is an error wrapping ErrNilResult: using it would panic or
// block forever.
func (r *Reflector[T, L]) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, <-chan watch.Event, error) {
	opts, err := r.listOptions(opts)
	if err != nil {
		return nil, nil, err
	}
	w, err := callLW("Watch", func() (watch.Interface, error) { return r.lw.Watch(ctx, opts) })
	if err != nil {
		return nil, nil, err
	}
	if guard.IsNil(w) {
		return nil, nil, fmt.Errorf("%w: Watch returned %#v", ErrNilResult, w)
	}
	events := w.ResultChan()
	if events == nil {
		w.Stop()
		return nil, nil, fmt.Errorf("%w: Watch returned a %T whose result channel is nil", ErrNilResult, w)
	}
	return w, events, nil
}

// callLW calls a ListerWatcher method, turning a panic into an error: the ListerWatcher
// is code at the library's boundary (DESIGN 18), a user's adapter as often as a client.
func callLW[R any](method string, call func() (R, error)) (_ R, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %s: %v\n%s", ErrListerWatcherPanicked, method, v, debug.Stack())
		}
	}()
	return call()
}

// listRV is the resource version to list from. A plain list always reads consistently
// (""): a list from "0" may be answered from a watch cache that lags, and a cache started
// from it could show a controller less than it has itself written (DESIGN 19). A
// watch-list continues from the last resource version seen ("" the first time and after
// 410 Gone or "too large resource version", a consistent read).
func (r *Reflector[T, L]) listRV(watchList bool) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if watchList && !r.relist {
		return r.lastRV
	}
	return ""
}

// list lists (or watch-lists) and replaces the cache. For a watch-list it returns the
// open watch and its result channel, to be continued.
func (r *Reflector[T, L]) list(ctx context.Context) (watch.Interface, <-chan watch.Event, error) {
	start := r.clock.Now()
	if r.opts.WatchList && !r.watchListAsked {
		r.watchListAsked = true
		// The ListerWatcher's IsWatchListSemanticsUnSupported is code at the boundary too.
		unsupported, err := callLW("IsWatchListSemanticsUnSupported", func() (bool, error) { return WatchListUnsupported(r.lw), nil })
		if err != nil {
			r.report(ctx, fmt.Errorf("%s: %w; listing instead", r.opts.Name, err))
			unsupported = true
		}
		if unsupported {
			// As client-go's reflector says it: expected of a fake in unit tests.
			klog.FromContext(ctx).V(2).Info("the ListerWatcher does not support watch-list, listing instead", "reflector", r.opts.Name, "listerWatcher", fmt.Sprintf("%T", r.lw))
			r.watchListUnsupported = true
		}
	}
	if r.opts.WatchList && !r.watchListUnsupported {
		w, events, n, err := r.watchList(ctx)
		switch {
		case err == nil:
			r.listed(ctx, n, start)
			return w, events, nil
		case errors.Is(err, ErrWatchListStalled):
			r.report(ctx, fmt.Errorf("%s: %w; listing instead, from now on", r.opts.Name, err))
		case apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err):
			klog.FromContext(ctx).V(2).Info("server rejected watch-list, falling back to list", "reflector", r.opts.Name, "err", err)
		default:
			return nil, nil, r.classify(listError{err})
		}
		r.watchListUnsupported = true
	}
	// partial holds the errors of the pages the ListerWatcher could read only in part. The
	// pager drops a page that comes with an error, so the page function sets the error
	// aside and passes the page on.
	var partial []error
	p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		if opts.Continue == "" {
			// A first page, or the pager's full list after an expired continue token: the
			// pages read before are not part of the result.
			partial = nil
		}
		l, err := callLW("List", func() (L, error) { return r.lw.List(ctx, opts) })
		switch {
		case err != nil && (guard.IsNil(l) || !errors.Is(err, ErrIncompleteList)):
			return nil, err
		case guard.IsNil(l):
			return nil, fmt.Errorf("%w: List returned %#v", ErrNilResult, l)
		case err != nil:
			partial = append(partial, err)
		}
		return l, nil
	}))
	p.PageSize = r.opts.PageSize
	opts, err := r.listOptions(metav1.ListOptions{ResourceVersion: r.listRV(false)})
	if err != nil {
		return nil, nil, fmt.Errorf("list: %w", err)
	}
	list, _, err := p.List(ctx, opts)
	if err != nil {
		return nil, nil, r.classify(listError{fmt.Errorf("list: %w", err)})
	}
	acc, err := meta.ListAccessor(list)
	if err != nil {
		return nil, nil, fmt.Errorf("list: %w: %w", ErrUnexpectedObject, err)
	}
	raw, err := meta.ExtractList(list)
	if err != nil {
		return nil, nil, fmt.Errorf("list: %w: %w", ErrUnexpectedObject, err)
	}
	completeness := eventcache.CompleteList
	for _, err := range partial {
		r.report(ctx, fmt.Errorf("%s: list: %w", r.opts.Name, err))
		completeness = eventcache.IncompleteList
	}
	items := make([]T, 0, len(raw))
	for i, o := range raw {
		obj, _, err := r.read(o)
		if err != nil {
			r.report(ctx, fmt.Errorf("%s: list item %d: %w", r.opts.Name, i, err))
			completeness = eventcache.IncompleteList
			continue
		}
		items = append(items, obj)
	}
	// Reported before the cache has the list: once it has, it may sync, and whoever
	// waits for that must find the list counted.
	r.setRV(ctx, acc.GetResourceVersion())
	r.listed(ctx, len(items), start)
	if err := r.cache.Replace(items, acc.GetResourceVersion(), completeness); err != nil {
		r.report(ctx, fmt.Errorf("%s: replace: %w", r.opts.Name, err))
	}
	return nil, nil, nil
}

func (r *Reflector[T, L]) listed(ctx context.Context, n int, start time.Time) {
	r.mu.Lock()
	r.relist = false
	r.mu.Unlock()
	r.metrics.Call(ctx, "Listed", func(m Metrics) { m.Listed(r.opts.Name, n, r.clock.Since(start)) })
}

// watchList streams the initial state through a watch and replaces the cache once the
// server's initial-events-end bookmark arrives. It returns the watch and its result
// channel, to be continued.
func (r *Reflector[T, L]) watchList(ctx context.Context) (watch.Interface, <-chan watch.Event, int, error) {
	sendInitial := true
	w, events, err := r.watch(ctx, metav1.ListOptions{
		ResourceVersion:      r.listRV(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		SendInitialEvents:    &sendInitial,
		AllowWatchBookmarks:  true,
		TimeoutSeconds:       watchTimeout(),
	})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("watch-list: %w", err)
	}
	var items []T
	completeness := eventcache.CompleteList
	// The stall timer fires every WatchListStall; a period without any event is a stall.
	stall := r.stallClock.NewTimer(WatchListStall)
	defer stall.Stop()
	quiet := true
	for {
		var e watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			w.Stop()
			return nil, nil, 0, ctx.Err()
		case <-stall.C():
			if quiet {
				w.Stop()
				return nil, nil, 0, fmt.Errorf("%w: no event for %v after %d initial events from a %T", ErrWatchListStalled, WatchListStall, len(items), r.lw)
			}
			quiet = true
			stall.Reset(WatchListStall)
			continue
		case e, ok = <-events:
		}
		quiet = false
		if !ok {
			w.Stop()
			return nil, nil, 0, fmt.Errorf("watch-list: watch closed before the initial events ended")
		}
		r.metrics.Call(ctx, "WatchEvent", func(m Metrics) { m.WatchEvent(r.opts.Name, e.Type) })
		switch e.Type {
		case watch.Added, watch.Modified:
			obj, _, err := r.read(e.Object)
			if err != nil {
				r.report(ctx, fmt.Errorf("%s: watch-list %s event: %w", r.opts.Name, e.Type, err))
				completeness = eventcache.IncompleteList
				continue
			}
			items = append(items, obj)
		case watch.Bookmark:
			rv, initialEventsEnd, err := readBookmark(e.Object)
			if err != nil {
				r.report(ctx, fmt.Errorf("%s: watch-list bookmark: %w", r.opts.Name, err))
				continue
			}
			if initialEventsEnd {
				r.setRV(ctx, rv) // before the cache can sync, as list's
				if err := r.cache.Replace(items, rv, completeness); err != nil {
					r.report(ctx, fmt.Errorf("%s: replace: %w", r.opts.Name, err))
				}
				return w, events, len(items), nil
			}
		case watch.Error:
			w.Stop()
			return nil, nil, 0, watchError(e.Object)
		default:
			// The initial events hold only additions: whatever else came may have stood for
			// an object of the list.
			r.report(ctx, fmt.Errorf("%s: watch-list: %w: event type %q", r.opts.Name, ErrUnexpectedObject, e.Type))
			completeness = eventcache.IncompleteList
		}
	}
}

// fastEvents is how many events in a row handleWatch takes while they are waiting,
// before it looks at its other channels.
const fastEvents = 64

// handleWatch applies w's events to the cache until w ends, fails or ctx is done, and
// returns how many events it received.
func (r *Reflector[T, L]) handleWatch(ctx context.Context, events <-chan watch.Event, resync <-chan time.Time) (int, error) {
	// The end of ctx is a request like the others, so that the loop waits on two channels.
	defer context.AfterFunc(ctx, r.poke)()
	n := 0
	for fast := 0; ; fast++ {
		r.caughtUp()
		var e watch.Event
		var ok, ready bool
		if fast < fastEvents {
			// An event already waiting is taken without the select below, which locks every
			// channel it waits on; the select still runs at least every fastEvents events,
			// so that a request on the other channels waits for at most that many.
			select {
			case e, ok = <-events:
				ready = true
			default:
			}
		}
		if !ready {
			fast = 0
			select {
			case <-r.control:
				if err := r.requested(ctx); err != nil {
					return n, err
				}
				continue
			case <-resync:
				if err := r.cache.Synchronize(); err != nil {
					r.report(ctx, fmt.Errorf("%s: synchronize: %w", r.opts.Name, err))
				}
				continue
			case e, ok = <-events:
			}
		}
		if !ok {
			return n, nil
		}
		r.metrics.Call(ctx, "WatchEvent", func(m Metrics) { m.WatchEvent(r.opts.Name, e.Type) })
		if e.Type != watch.Error {
			n++
		}
		var t event.Type
		switch e.Type {
		case watch.Added:
			t = event.Added
		case watch.Modified:
			t = event.Modified
		case watch.Deleted:
			t = event.Deleted
		case watch.Bookmark:
			if rv, _, err := readBookmark(e.Object); err == nil {
				if b, ok := r.cache.(eventcache.Bookmarker); ok {
					b.Bookmark(rv)
				}
				r.setRV(ctx, rv)
			} else {
				r.report(ctx, fmt.Errorf("%s: bookmark: %w", r.opts.Name, err))
			}
			continue
		case watch.Error:
			return n, watchError(e.Object)
		default:
			r.report(ctx, fmt.Errorf("%s: %w: watch event type %q", r.opts.Name, ErrUnexpectedObject, e.Type))
			continue
		}
		obj, rv, err := r.read(e.Object)
		if err != nil {
			r.report(ctx, fmt.Errorf("%s: watch %s event: %w", r.opts.Name, e.Type, err))
			if t != event.Deleted {
				// The object keeps its cached state, and the resource version stays before
				// the event, so that a watch resumed from it sees the event again.
				continue
			}
			// The server says the object is gone; only its final state is unreadable.
			// Skipping the event would keep a deleted object cached until a complete relist,
			// which may never come (DESIGN 15): record a final-state-unknown deletion, which
			// the consumer delivers with the last known state, keyed by what can be read.
			var ok bool
			if obj, rv, ok = deletedKey[T](e.Object); !ok {
				continue
			}
			if err := r.cache.Add(event.Event[T]{Type: event.Deleted, Object: obj, FinalStateUnknown: true}); err != nil {
				r.report(ctx, fmt.Errorf("%s: watch %s event: %w", r.opts.Name, e.Type, err))
				continue
			}
			r.setRV(ctx, rv)
			continue
		}
		if err := r.cache.Add(event.Event[T]{Type: t, Object: obj}); err != nil {
			r.report(ctx, fmt.Errorf("%s: watch %s event: %w", r.opts.Name, e.Type, err))
		}
		r.setRV(ctx, rv)
	}
}

// requested serves every request the watch loop was poked for, returning the error that
// ends the watch when ctx is done or a relist is asked for. A relist comes last: the poke
// that told of it told of the others too, and none comes for them again.
func (r *Reflector[T, L]) requested(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.progressAsked.Swap(false) {
		r.startProbe(ctx)
	}
	r.mu.Lock()
	if r.probed != nil {
		r.found, r.probed = r.probed, nil
	}
	r.mu.Unlock()
	if r.relistAsked.Swap(false) {
		return errRelistRequested
	}
	return nil
}

// probe is what a watch opened for RequestProgress found: the server had sent every event
// of the reflector's selection up to bookmark, the newest of them at last (0 for none).
type probe struct{ last, bookmark uint64 }

// startProbe opens the watch of RequestProgress beside the reflector's own, unless one is
// open already or nothing has been listed yet (the list's version is the cache's first).
func (r *Reflector[T, L]) startProbe(ctx context.Context) {
	r.mu.Lock()
	from := r.lastRV
	if r.probing || from == "" {
		r.mu.Unlock()
		return
	}
	r.probing = true
	r.mu.Unlock()
	r.probes.Go(func() {
		defer func() {
			r.mu.Lock()
			r.probing = false
			r.mu.Unlock()
		}()
		p, err := r.probe(ctx, from)
		if err != nil {
			klog.FromContext(ctx).V(4).Info("no bookmark from the watch opened for progress", "reflector", r.opts.Name, "from", from, "err", err)
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.probed = &p
		r.mu.Unlock()
		r.poke()
	})
}

// probe watches from resource version from until the first bookmark, and returns it with
// the newest event before it.
func (r *Reflector[T, L]) probe(ctx context.Context, from string) (probe, error) {
	w, events, err := r.watch(ctx, metav1.ListOptions{
		ResourceVersion:     from,
		AllowWatchBookmarks: true,
		TimeoutSeconds:      ptr.To(int64(probeTimeout / time.Second)),
	})
	if err != nil {
		return probe{}, err
	}
	defer w.Stop()
	var p probe
	for {
		var e watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return probe{}, ctx.Err()
		case e, ok = <-events:
		}
		if !ok {
			return probe{}, errors.New("the watch ended before a bookmark")
		}
		switch e.Type {
		case watch.Error:
			return probe{}, watchError(e.Object)
		case watch.Bookmark:
			rv, _, err := readBookmark(e.Object)
			if err != nil {
				return probe{}, err
			}
			if p.bookmark, err = strconv.ParseUint(rv, 10, 64); err != nil {
				return probe{}, fmt.Errorf("bookmark: %w", err)
			}
			return p, nil
		default:
			o, err := meta.Accessor(e.Object)
			if err != nil {
				return probe{}, fmt.Errorf("%s event: %w", e.Type, err)
			}
			rv, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
			if err != nil {
				return probe{}, fmt.Errorf("%s event: %w", e.Type, err)
			}
			p.last = max(p.last, rv)
		}
	}
}

// caughtUp passes the probe's bookmark to the cache once the reflector has seen every
// event the probe did: nothing of its selection then lies between its newest version and
// the bookmark's. Called by the watch loop only.
func (r *Reflector[T, L]) caughtUp() {
	if r.found == nil {
		return
	}
	seen, err := strconv.ParseUint(r.LastSyncResourceVersion(), 10, 64)
	if err == nil && seen < r.found.last {
		return
	}
	// An opaque version orders nothing, and the cache then waits for no version.
	if b, ok := r.cache.(eventcache.Bookmarker); ok && err == nil {
		b.Bookmark(strconv.FormatUint(r.found.bookmark, 10))
	}
	r.found = nil
}

// read returns o as a T, after Options.Transform, with the resource version it had before
// the transform; or an error, wrapping ErrUnexpectedObject or the transform's error, for
// an Unreadable, a nil or typed-nil object, one of another type than T, and one the
// transform fails on or turns into nil.
func (r *Reflector[T, L]) read(o runtime.Object) (T, string, error) {
	var zero T
	if u, ok := o.(*Unreadable); ok && u != nil {
		cause := u.Err
		if cause == nil {
			cause = errors.New("no reason given")
		}
		return zero, "", fmt.Errorf("%w: unreadable %T: %w", ErrUnexpectedObject, u.Object, cause)
	}
	obj, ok := o.(T)
	if !ok || obj == zero || guard.IsNil(obj) {
		return zero, "", errUnexpected[T](o)
	}
	rv := obj.GetResourceVersion()
	if r.opts.Transform == nil {
		return obj, rv, nil
	}
	out, err := r.transform(obj)
	if err == nil && (out == zero || guard.IsNil(out)) {
		// The cache and handlers dereference what they get, so a nil must stop here.
		err = fmt.Errorf("%w: Transform returned nil", ErrUnexpectedObject)
	}
	if err != nil {
		return zero, "", fmt.Errorf("transform %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return out, rv, nil
}

// transform calls Options.Transform, turning a panic into an error wrapping
// ErrCallbackPanicked: the object is then one it failed on.
func (r *Reflector[T, L]) transform(obj T) (out T, err error) {
	defer func() {
		if v := recover(); v != nil {
			var zero T
			out, err = zero, fmt.Errorf("%w: Transform: %v\n%s", ErrCallbackPanicked, v, debug.Stack())
		}
	}()
	return r.opts.Transform(obj)
}

// deletedKey returns, for the object of a DELETED event that read refused, a T that
// carries its identity (namespace, name, UID, labels, annotations, resource version), for
// the cache to key the deletion by: the object itself when it is a T that Transform
// refused, or a new T with the metadata of an Unreadable's object. It returns false for a
// nil object or one of another type, which say nothing about which object is gone, and
// when T is not a pointer to a struct it can allocate.
func deletedKey[T event.Object](o runtime.Object) (T, string, bool) {
	var zero T
	if obj, ok := o.(T); ok && !guard.IsNil(obj) {
		return obj, obj.GetResourceVersion(), true
	}
	u, ok := o.(*Unreadable)
	if !ok || u == nil || guard.IsNil(u.Object) {
		return zero, "", false
	}
	if obj, ok := u.Object.(T); ok && !guard.IsNil(obj) {
		return obj, obj.GetResourceVersion(), true
	}
	src, err := meta.Accessor(u.Object)
	typ := goreflect.TypeOf(zero)
	if err != nil || guard.IsNil(src) || typ == nil || typ.Kind() != goreflect.Pointer || typ.Elem().Kind() != goreflect.Struct {
		return zero, "", false
	}
	obj, ok := goreflect.New(typ.Elem()).Interface().(T)
	if !ok || !copyIdentity(obj, src) {
		return zero, "", false
	}
	return obj, src.GetResourceVersion(), true
}

// copyIdentity copies src's identity onto obj, a zero value just allocated. It returns
// false if obj's metadata cannot be set, as when it sits behind an embedded pointer that
// is nil in a zero value: a user's type must not crash the reflector.
func copyIdentity[T event.Object](obj T, src metav1.Object) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	obj.SetNamespace(src.GetNamespace())
	obj.SetName(src.GetName())
	obj.SetUID(src.GetUID())
	obj.SetLabels(src.GetLabels())
	obj.SetAnnotations(src.GetAnnotations())
	obj.SetResourceVersion(src.GetResourceVersion())
	return true
}

func errUnexpected[T event.Object](o runtime.Object) error {
	var want T
	if guard.IsNil(o) {
		return fmt.Errorf("%w: nil object, want %T", ErrUnexpectedObject, want)
	}
	if _, ok := o.(T); ok {
		return fmt.Errorf("%w: %T holding nil, want %T", ErrUnexpectedObject, o, want)
	}
	return fmt.Errorf("%w: got %T, want %T", ErrUnexpectedObject, o, want)
}

// readBookmark returns the resource version of a BOOKMARK event's object and whether it
// marks the end of a watch-list's initial events, or an error wrapping
// ErrUnexpectedObject for an object with no readable metadata.
func readBookmark(o runtime.Object) (rv string, initialEventsEnd bool, err error) {
	if guard.IsNil(o) {
		return "", false, fmt.Errorf("%w: nil bookmark object %#v", ErrUnexpectedObject, o)
	}
	acc, err := meta.Accessor(o)
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrUnexpectedObject, err)
	}
	if guard.IsNil(acc) {
		return "", false, fmt.Errorf("%w: %T has nil metadata", ErrUnexpectedObject, o)
	}
	return acc.GetResourceVersion(), acc.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true", nil
}

// watchError turns the object of an ERROR event into an error that wraps ErrWatchEvent and
// the server's status: a *metav1.Status, or an Unstructured one as the dynamic client
// decodes it. Any other object, nil included, wraps ErrUnexpectedObject instead.
func watchError(o runtime.Object) error {
	if guard.IsNil(o) {
		return fmt.Errorf("%w: %w: nil object %#v, want a *v1.Status", ErrWatchEvent, ErrUnexpectedObject, o)
	}
	err := apierrors.FromObject(o)
	var unexpected *apierrors.UnexpectedObjectError
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &unexpected):
		return fmt.Errorf("%w: %w: got %T, want a *v1.Status", ErrWatchEvent, ErrUnexpectedObject, o)
	case errors.As(err, &status):
		return fmt.Errorf("%w: %w", ErrWatchEvent, err)
	default:
		// An Unstructured Status that does not convert.
		return fmt.Errorf("%w: %w: %w", ErrWatchEvent, ErrUnexpectedObject, err)
	}
}

// watchTimeout spreads watch timeouts over 5 to 10 minutes, as client-go does, so that
// many reflectors do not reconnect at once.
func watchTimeout() *int64 {
	t := int64(300 + rand.IntN(300))
	return &t
}
