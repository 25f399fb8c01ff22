package controller

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// Handler receives the events of a Controller, one at a time, in order for each key.
// Handle runs on the handler's own goroutine; a slow Handle delays only this handler,
// whose backlog is compressed per key (see package queue) and so stays bounded by the
// number of keys. ctx is the controller's Run context. The event's objects are the
// cache's own: read-only (see event.Event).
type Handler[T event.Object] interface {
	Handle(ctx context.Context, e event.Event[T])
}

// HandlerFunc adapts a plain function to a Handler.
type HandlerFunc[T event.Object] func(ctx context.Context, e event.Event[T])

// Handle calls f.
func (f HandlerFunc[T]) Handle(ctx context.Context, e event.Event[T]) { f(ctx, e) }

// HandlerFuncs adapts up to three plain functions, one per event type, to a Handler, in
// the shape of client-go's ResourceEventHandlerFuncs. A nil function ignores its events.
//
// Unlike client-go's, a handler's backlog merges the pending changes of a key (see package
// queue): a change that reaches the backlog while the key's addition is still pending is
// delivered inside that addition, not as an update. That includes a change made right
// after Controller.WaitForSync returned, which says the initial list is in the handlers'
// backlogs, not that they have handled it. A handler that reacts to changes should
// therefore act on the object's whole state in AddFunc as in UpdateFunc (level-driven, as
// typed.Loop does); one that must see an update should wait for its own
// Registration.WaitForSync before making the change, or use Options.FullHistory.
type HandlerFuncs[T event.Object] struct {
	// AddFunc receives an object the handler did not know: created, seen in a list, or
	// created and changed before the handler got to it.
	AddFunc func(ctx context.Context, obj T)
	// UpdateFunc receives the state the handler last saw and the new one; on a resync
	// both are the same object.
	UpdateFunc func(ctx context.Context, oldObj, newObj T)
	// DeleteFunc receives the object's last state. finalStateUnknown is true when the
	// deletion was inferred from a relist (the object was missing from it), so obj is the
	// last state the cache knew rather than the state the object was deleted in: the
	// event client-go wraps in a DeletedFinalStateUnknown tombstone.
	DeleteFunc func(ctx context.Context, obj T, finalStateUnknown bool)
}

// Handle dispatches e to the function for its type.
func (f HandlerFuncs[T]) Handle(ctx context.Context, e event.Event[T]) {
	switch e.Type {
	case event.Added:
		if f.AddFunc != nil {
			f.AddFunc(ctx, e.Object)
		}
	case event.Modified:
		if f.UpdateFunc != nil {
			f.UpdateFunc(ctx, e.Prior, e.Object)
		}
	case event.Deleted:
		if f.DeleteFunc != nil {
			f.DeleteFunc(ctx, e.Object, e.FinalStateUnknown)
		}
	}
}

// Registration is a handler's membership in a Controller. A nil Registration (what a
// failed AddHandler returns) has never synced, has nothing pending, and removes nothing;
// its WaitForSync returns an error wrapping ErrNilArgument.
type Registration struct {
	synced  <-chan struct{}
	pending func() int
	remove  func()
	removed sync.Once
}

// Pending returns the number of keys waiting for the handler: in its backlog, or in the
// batch of keys it took from the backlog and has not reached yet. A key waits at most
// twice (once in that batch, and once more in the backlog if it changed since) and holds
// at most queue.MaxCompressedLen events each time (unless Options.FullHistory), so this
// bounds the backlog's memory by the number of keys however many events a slow handler
// falls behind by.
func (r *Registration) Pending() int {
	if r == nil {
		return 0
	}
	return r.pending()
}

// HasSynced reports whether the handler has processed the initial state: every object
// of the controller's first list when it was registered before the controller synced,
// or the known objects at the time of registration otherwise.
func (r *Registration) HasSynced() bool {
	if r == nil {
		return false
	}
	select {
	case <-r.synced:
		return true
	default:
		return false
	}
}

// Synced returns a channel that is closed once HasSynced is true. A handler removed
// before it synced never does: wait on it together with a context.
func (r *Registration) Synced() <-chan struct{} {
	if r == nil {
		return nil // never ready, as a nil Registration never syncs
	}
	return r.synced
}

// WaitForSync blocks until the handler has handled its initial state (returning nil) or
// ctx is done (returning ctx.Err()). Unlike Controller.WaitForSync, which returns once
// the initial state is in every handler's backlog, it returns only once this handler has
// been called with all of it, so a change made afterwards reaches the handler as a change
// of its own.
func (r *Registration) WaitForSync(ctx context.Context) error {
	if r == nil {
		return fmt.Errorf("%w: a nil Registration", ErrNilArgument)
	}
	select {
	case <-r.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Remove stops delivering events to the handler and discards its backlog, so that
// Pending is 0 afterwards and the backlog's objects can be collected. An event being
// handled is allowed to finish. Remove is idempotent, and may be called from the handler.
func (r *Registration) Remove() {
	if r != nil {
		r.removed.Do(r.remove)
	}
}

// runner owns one handler's goroutine and keyed backlog: a queue.Backlog drained into the
// handler, the same stage as the event cache's.
type runner[T event.Object] struct {
	name    string
	h       Handler[T]
	cfg     *config
	ctx     context.Context // the controller's Run context, handed to the handler
	backlog *queue.Backlog[T]
	stopped atomic.Bool
	synced  chan struct{}
	// unstarted counts the keys of the batch being handled that the handler has not
	// reached: they left the backlog, yet they wait as much as those still in it.
	unstarted atomic.Int64
}

func newRunner[T event.Object](name string, h Handler[T], cfg *config) *runner[T] {
	r := &runner[T]{name: name, h: h, cfg: cfg, synced: make(chan struct{})}
	r.backlog = queue.NewBacklog(queue.BacklogOptions[T]{
		Compression: cfg.compression,
		OnSynced:    func() { close(r.synced) },
	})
	return r
}

// seal marks the end of the initial state.
func (r *runner[T]) seal() { r.backlog.Seal() }

// stop ends run after the event being handled, and discards the backlog.
func (r *runner[T]) stop() {
	r.stopped.Store(true)
	r.backlog.Close()
	r.backlog.Clear()
}

// run handles the backlog until stop is called. The backlog's drain loop does not end
// with ctx: the controller stops each runner after the last event has reached it.
func (r *runner[T]) run(ctx context.Context) {
	r.ctx = ctx
	_ = r.backlog.Drain(context.WithoutCancel(ctx), r)
}

// Apply implements queue.Consumer: a handler's events are resolved already.
func (r *runner[T]) Apply(batch []event.Event[T]) ([]event.Event[T], []error) { return batch, nil }

// pending returns the number of keys the handler has yet to reach.
func (r *runner[T]) pending() int {
	if r.stopped.Load() {
		return 0
	}
	return r.backlog.Len() + int(r.unstarted.Load())
}

// Deliver implements queue.Consumer: it calls the handler with each event, until stop.
func (r *runner[T]) Deliver(batch []event.Event[T]) {
	keys := 0
	for i := range batch {
		if i == 0 || batch[i].Key != batch[i-1].Key {
			keys++
		}
	}
	r.unstarted.Store(int64(keys))
	for i, e := range batch {
		if r.stopped.Load() {
			return
		}
		if i == 0 || e.Key != batch[i-1].Key {
			r.unstarted.Add(-1)
		}
		r.handle(e)
	}
}

// Report implements queue.Consumer; Apply finds no errors.
func (r *runner[T]) Report([]error) {}

func (r *runner[T]) handle(e event.Event[T]) {
	ctx, c := r.ctx, r.cfg
	var start time.Time
	if c.metrics.Set() {
		start = time.Now()
	}
	defer func() {
		if v := recover(); v != nil {
			err := &PanicError{Kind: "handler", Name: r.name, Key: e.Key, Event: e.String(), Value: v, Stack: debug.Stack()}
			c.metrics.Call(ctx, "HandlerPanic", func(m Metrics) { m.HandlerPanic(c.name, r.name) })
			c.reportError(ctx, err)
		}
		if c.metrics.Set() {
			c.metrics.Call(ctx, "HandlerLatency", func(m Metrics) { m.HandlerLatency(c.name, r.name, time.Since(start)) })
		}
	}()
	r.h.Handle(ctx, e)
}

// distributor hands each resolved event to every handler's backlog.
type distributor[T event.Object] struct {
	mu      sync.RWMutex
	runners []*runner[T]
}

// Deliver implements eventcache.Sink: each handler's backlog takes the batch with one
// lock acquisition.
func (d *distributor[T]) Deliver(batch []event.Event[T]) {
	d.mu.RLock()
	for _, r := range d.runners {
		r.backlog.PushBatch(batch)
	}
	d.mu.RUnlock()
}

func (d *distributor[T]) add(r *runner[T]) {
	d.mu.Lock()
	d.runners = append(d.runners, r)
	d.mu.Unlock()
}

func (d *distributor[T]) remove(r *runner[T]) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, x := range d.runners {
		if x == r {
			d.runners = append(d.runners[:i:i], d.runners[i+1:]...)
			return true
		}
	}
	return false
}

func (d *distributor[T]) all() []*runner[T] {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return append([]*runner[T](nil), d.runners...)
}
