package controller

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// Handler receives the events of a Controller, one at a time, in order for each key.
// Handle runs on the handler's own goroutine; a slow Handle delays only this handler,
// whose backlog is compressed per key (see package queue) and so stays bounded by the
// number of keys. ctx is the controller's Run context.
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

// HandlerPanicError reports a panic recovered from a Handler. The handler goes on with its
// next event.
type HandlerPanicError struct {
	// Handler is the name the handler was registered under.
	Handler string
	// Key is the key of the event being handled.
	Key string
	// Event describes the event being handled (see event.Event.String).
	Event string
	// Value is what the handler panicked with.
	Value any
	// Stack is the handler's goroutine stack at the panic.
	Stack []byte
}

// Error describes the panic, its handler, event and key.
func (e *HandlerPanicError) Error() string {
	return fmt.Sprintf("handler %q panicked on %s (key %s): %v", e.Handler, e.Event, e.Key, e.Value)
}

// Registration is a handler's membership in a Controller.
type Registration struct {
	synced  <-chan struct{}
	pending func() int
	remove  func()
	removed sync.Once
}

// Pending returns the number of keys waiting in the handler's backlog. Each key holds at
// most queue.MaxCompressedLen events (unless Options.FullHistory), so this bounds the
// backlog's memory however many events a slow handler falls behind by.
func (r *Registration) Pending() int { return r.pending() }

// HasSynced reports whether the handler has processed the initial state: every object
// of the controller's first list when it was registered before the controller synced,
// or the known objects at the time of registration otherwise.
func (r *Registration) HasSynced() bool {
	select {
	case <-r.synced:
		return true
	default:
		return false
	}
}

// Synced returns a channel that is closed once HasSynced is true. A handler removed
// before it synced never does: wait on it together with a context.
func (r *Registration) Synced() <-chan struct{} { return r.synced }

// WaitForSync blocks until the handler has handled its initial state (returning nil) or
// ctx is done (returning ctx.Err()). Unlike Controller.WaitForSync, which returns once
// the initial state is in every handler's backlog, it returns only once this handler has
// been called with all of it, so a change made afterwards reaches the handler as a change
// of its own.
func (r *Registration) WaitForSync(ctx context.Context) error {
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
func (r *Registration) Remove() { r.removed.Do(r.remove) }

// runner owns one handler's goroutine and keyed backlog.
type runner[T event.Object] struct {
	name string
	h    Handler[T]

	mu         sync.Mutex
	cond       sync.Cond
	backlog    *queue.FIFO[T]
	sealed     bool // the initial state has been pushed completely
	busyMarked bool // an initial-state key is being handled
	stopped    bool
	synced     chan struct{}
	syncedDone bool
}

func newRunner[T event.Object](name string, h Handler[T], c queue.Compression) *runner[T] {
	r := &runner[T]{
		name:    name,
		h:       h,
		backlog: queue.NewFIFO(c, queue.KnownFromFirstEvent[T]),
		synced:  make(chan struct{}),
	}
	r.cond.L = &r.mu
	return r
}

// push adds a resolved event to the backlog; it never blocks on the handler.
func (r *runner[T]) push(key string, e event.Event[T]) {
	r.mu.Lock()
	if !r.stopped {
		r.backlog.Push(key, e, !r.sealed)
		r.cond.Signal()
	}
	r.mu.Unlock()
}

// seal marks the end of the initial state.
func (r *runner[T]) seal() {
	r.mu.Lock()
	r.sealed = true
	r.checkSynced()
	r.mu.Unlock()
}

func (r *runner[T]) checkSynced() {
	if r.sealed && !r.syncedDone && r.backlog.Marked() == 0 && !r.busyMarked {
		r.syncedDone = true
		close(r.synced)
	}
}

func (r *runner[T]) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.backlog.Len()
}

func (r *runner[T]) stop() {
	r.mu.Lock()
	r.stopped = true
	r.backlog.Clear()
	r.cond.Broadcast()
	r.mu.Unlock()
}

// run handles the backlog until stop is called.
func (r *runner[T]) run(ctx context.Context, c *config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var buf []event.Event[T]
	for {
		for r.backlog.Len() == 0 && !r.stopped {
			r.cond.Wait()
		}
		if r.stopped {
			return
		}
		key, events, marked, _ := r.backlog.Pop(buf[:0])
		buf = events
		r.busyMarked = marked
		r.mu.Unlock()
		for _, e := range events {
			e.Key = key
			r.handle(ctx, c, key, e)
		}
		r.mu.Lock()
		r.busyMarked = false
		r.checkSynced()
	}
}

func (r *runner[T]) handle(ctx context.Context, c *config, key string, e event.Event[T]) {
	var start time.Time
	if c.metrics != nil {
		start = time.Now()
	}
	defer func() {
		if v := recover(); v != nil {
			err := &HandlerPanicError{Handler: r.name, Key: key, Event: e.String(), Value: v, Stack: debug.Stack()}
			if c.metrics != nil {
				c.metrics.HandlerPanic(r.name)
			}
			c.reportError(ctx, err)
		}
		if c.metrics != nil {
			c.metrics.HandlerLatency(r.name, time.Since(start))
		}
	}()
	r.h.Handle(ctx, e)
}

// distributor hands each resolved event to every handler's backlog.
type distributor[T event.Object] struct {
	mu      sync.RWMutex
	runners []*runner[T]
}

// Deliver implements eventcache.Sink.
func (d *distributor[T]) Deliver(key string, e event.Event[T]) {
	d.mu.RLock()
	for _, r := range d.runners {
		r.push(key, e)
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
