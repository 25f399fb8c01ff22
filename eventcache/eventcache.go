// Package eventcache holds the event cache of the pipeline: the EventCache interface the
// reflector writes into, its stock implementation EventQueueCollection (one ordered queue
// of pending events per key), the known objects (a Writer and its read-only Store), and
// the ResourceTrackingConsumer that applies each key's events to the known objects before
// passing them on.
//
// The collection and the consumer share the known objects: the collection reads them to
// synthesise deletions on Replace and modifications on Synchronize, the consumer is their
// only writer. The consumer applies events while the collection's lock is held, so every
// reader of the collection sees the known objects and the pending queues as one
// consistent state: Synchronize can never resurrect an object whose deletion is being
// delivered, and Replace never sees half-applied events. They share them down to the
// entry: the Store keeps one entry per key (queue.Entry) that holds the key's known object
// and its pending events, and is the collection's queue.Index, so an event costs the
// drain loop one lookup of its key. Readers of the Store see known objects only; the
// entry of a key that is pending and not known is dropped once its events are applied.
//
// Deviation from DESIGN 5: Replace takes a ListCompleteness. A list that is
// IncompleteList (its source could not read some of the listed objects: an item of the
// wrong type, one that does not convert, one without a key) is recorded as synchronization
// additions only, with no synthesised deletion. A key missing from such a list may be one
// of the unreadable items, still alive on the server, and a deletion would make the
// handlers act on a live object as gone (DESIGN 18). Objects that did vanish are deleted
// by the next complete list or by the watch.
package eventcache

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// EventCache is what a reflector writes into. Its three operations never wait for
// consumers or handlers.
type EventCache[T event.Object] interface {
	// Add records one event seen on a watch.
	Add(e event.Event[T]) error
	// Replace records a list of objects: a synchronization addition for each, and, when
	// the list is CompleteList, a final-state-unknown deletion for each key that is known
	// or pending but not listed, atomically. An IncompleteList synthesises no deletion.
	Replace(objects []T, resourceVersion string, completeness ListCompleteness) error
	// Synchronize records a synchronization modification for every known object that has
	// nothing pending.
	Synchronize() error
}

// ListCompleteness says whether a list given to Replace holds every object of its source.
type ListCompleteness int

const (
	// CompleteList is a list that holds every object: a known key it lacks is gone.
	CompleteList ListCompleteness = iota
	// IncompleteList is a list from which objects that could not be read were left out:
	// a known key it lacks may be one of them, so Replace deletes nothing.
	IncompleteList
)

// String returns "complete" or "incomplete".
func (c ListCompleteness) String() string {
	if c == IncompleteList {
		return "incomplete"
	}
	return "complete"
}

// Options configure an EventQueueCollection.
type Options[T event.Object] struct {
	// KeyFunc computes keys; event.ObjectKey when nil. An object it panics on is one it
	// returned an error for (the panic wraps ErrCallbackPanicked). It runs in Add and
	// Replace, on their caller's goroutine (the reflector's). With the default, Add only
	// checks that a watch event's object has a key, and the drain loop builds the key
	// string as it sorts the pushed events (see the queue package doc). Either way the key
	// is computed once: the consumer, the handlers and everything after them read it from
	// event.Event.Key.
	KeyFunc event.KeyFunc[T]
	// Compression selects the compression rules; queue.Compress by default.
	Compression queue.Compression
	// OnSynced, when set, is called once, with nothing locked, right after everything of
	// the first Replace has been consumed, before anything more is.
	OnSynced func()
	// Depth, when set, is called with the number of pending keys after every change, with
	// nothing locked (see queue.BacklogOptions).
	Depth func(pendingKeys int)
}

// EventQueueCollection is the stock EventCache: one ordered queue of pending events per
// key, drained in the order in which keys became pending by a single Drain loop. It is a
// queue.Backlog whose consumer keeps the known objects, with the three operations of an
// EventCache on top; see the queue package for the compression rules that bound its
// memory by the number of keys, and for the lock order.
type EventQueueCollection[T event.Object] struct {
	backlog *queue.Backlog[T]
	known   *Store[T]
	keyFunc event.KeyFunc[T]
	// defaultKeys says keyFunc is event.ObjectKey: Add then only checks that the object
	// has a key, and the drain loop builds it (see key), off the reflector's goroutine.
	defaultKeys bool
	waiters     waiters // of NotifyApplied
}

// NewEventQueueCollection returns an empty collection that reads the known objects from
// known. The consumer that drains it must hold known's Writer.
func NewEventQueueCollection[T event.Object](known *Store[T], opts Options[T]) *EventQueueCollection[T] {
	c := &EventQueueCollection[T]{known: known, keyFunc: guardKeyFunc(opts.KeyFunc)}
	if opts.KeyFunc == nil {
		c.keyFunc, c.defaultKeys = event.ObjectKey[T], true
	}
	c.backlog = queue.NewBacklog(queue.BacklogOptions[T]{
		Compression: opts.Compression,
		Index:       entryIndex[T]{known},
		SortInDrain: true, // the reflector pushes: it gets back to the watch at once
		OnSynced:    opts.OnSynced,
		Depth:       opts.Depth,
		OnApplied:   c.appliedChanged,
	})
	return c
}

// Add records one watch event. It returns an error, and records nothing, for an event
// with an invalid type or an object that has no key.
func (c *EventQueueCollection[T]) Add(e event.Event[T]) error {
	if e.Type < event.Added || e.Type > event.Deleted {
		return fmt.Errorf("%w: type %v", ErrInvalidEvent, e.Type)
	}
	var zero T
	var key string // computed by the drain loop (see key) when empty
	var err error
	if !c.defaultKeys || e.Object == zero || e.Object.GetName() == "" {
		key, err = c.keyFunc(e.Object) // a key of the user's, or an error to report
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	e.Key = key
	c.backlog.Push(e)
	return nil
}

// guardKeyFunc returns f turning a panic into an error: a user's KeyFunc runs on the
// reflector's goroutine, and an object it panics on is one it has no key for (DESIGN 18).
func guardKeyFunc[T event.Object](f event.KeyFunc[T]) event.KeyFunc[T] {
	if f == nil {
		return nil
	}
	return func(obj T) (key string, err error) {
		defer func() {
			if v := recover(); v != nil {
				key, err = "", fmt.Errorf("%w: KeyFunc: %v\n%s", ErrCallbackPanicked, v, debug.Stack())
			}
		}()
		return f(obj)
	}
}

// Replace records a list, atomically: a synchronization addition for every listed
// object and, when the list is CompleteList, a final-state-unknown deletion, carrying the
// newest state known or pending, for every key that is known or pending but not listed.
//
// Objects that have no key are skipped and reported in the returned error, and make the
// list incomplete. An incomplete list synthesises no deletion (this deviates from DESIGN
// 5, see the package doc): a missing key may belong to an object that is alive but could
// not be read, and deleting it would tell the handlers a live object is gone.
func (c *EventQueueCollection[T]) Replace(objects []T, resourceVersion string, completeness ListCompleteness) error {
	keys := make([]string, len(objects))
	var errs []error
	for i, obj := range objects {
		key, err := c.keyFunc(obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("list item %d: %w", i, err))
			continue
		}
		keys[i] = key
	}
	if errs != nil {
		// Drop the items without a key here, once, so that nothing below meets them.
		objects, keys = withKeys(objects, keys)
		completeness = IncompleteList
	}

	c.backlog.Update(func(pending queue.Pending[T]) {
		// With nothing known or pending, as on the first list, nothing can be gone; from an
		// incomplete list, nothing is known to be gone.
		var listed map[string]struct{}
		deletes := completeness == CompleteList && (c.known.Len() > 0 || pending.Len() > 0)
		if deletes {
			listed = make(map[string]struct{}, len(keys))
			for _, key := range keys {
				listed[key] = struct{}{}
			}
		}
		pending.Grow(len(objects))
		if c.known.Len() == 0 {
			c.known.reserve(objects)
		}
		for i, obj := range objects {
			pending.Push(event.Event[T]{Type: event.Added, Key: keys[i], Object: obj, Sync: true})
		}
		if deletes {
			var gone []event.Event[T]
			c.known.Range(func(key string, obj T) bool {
				if _, ok := listed[key]; !ok {
					gone = append(gone, event.Event[T]{Type: event.Deleted, Key: key, Object: obj, Sync: true, FinalStateUnknown: true})
				}
				return true
			})
			pending.Range(func(key string, _ []event.Event[T]) bool {
				if _, ok := listed[key]; !ok && !c.known.has(key) {
					gone = append(gone, event.Event[T]{Type: event.Deleted, Key: key, Sync: true, FinalStateUnknown: true})
				}
				return true
			})
			for _, e := range gone {
				if events := pending.Events(e.Key); len(events) > 0 {
					if last := events[len(events)-1]; last.Type != event.Deleted {
						e.Object = last.Object // the newest state the pipeline has seen
					}
				}
				pending.Push(e)
			}
		}
		pending.Listed(resourceVersion)
	})
	// The first list is the initial state (pushed before Seal), and the collection has
	// synced once its keys are consumed.
	c.backlog.Seal()
	return errors.Join(errs...)
}

// withKeys returns the objects that have a key, and their keys, in new slices.
func withKeys[T event.Object](objects []T, keys []string) ([]T, []string) {
	var validObjects []T
	var validKeys []string
	for i, key := range keys {
		if key != "" {
			validObjects, validKeys = append(validObjects, objects[i]), append(validKeys, key)
		}
	}
	return validObjects, validKeys
}

// Synchronize records a synchronization modification for every known object that has
// nothing pending. An object whose deletion is pending is left alone, and a deletion being
// delivered has already been applied to the known objects, so a resync never resurrects
// an object.
func (c *EventQueueCollection[T]) Synchronize() error {
	c.backlog.Update(func(pending queue.Pending[T]) {
		var keys []string
		var objs []T
		c.known.Range(func(key string, obj T) bool {
			if pending.Events(key) == nil {
				keys, objs = append(keys, key), append(objs, obj)
			}
			return true
		})
		for i, key := range keys {
			pending.Push(event.Event[T]{Type: event.Modified, Key: key, Object: objs[i], Sync: true})
		}
	})
	return nil
}

// Drain is the single drain loop: it hands the pending keys' events, in line order and in
// batches, to consumer (see queue.Consumer): Apply, with the collection locked, brings
// the known objects up to date, so that Replace and Synchronize always see them
// consistent with the pending events; Deliver, with the collection unlocked, hands the
// events on, so that the reflector's Add does not wait for delivery; Report gets the
// errors Apply found, with nothing locked. The stock consumer is a
// ResourceTrackingConsumer. Drain returns when ctx is done (with ctx.Err()) or the
// collection is closed (with queue.ErrClosed). Only one Drain may run at a time.
func (c *EventQueueCollection[T]) Drain(ctx context.Context, consumer queue.Consumer[T]) error {
	return c.backlog.Drain(ctx, c.byEntry(consumer))
}

// byEntry returns consumer, or, for a ResourceTrackingConsumer that writes the
// collection's own store, the same consumer applying each batch to the entries the
// backlog found for it (entryConsumer), which saves a lookup per event.
func (c *EventQueueCollection[T]) byEntry(consumer queue.Consumer[T]) queue.Consumer[T] {
	if rtc, ok := consumer.(*ResourceTrackingConsumer[T]); ok && rtc.w.s == c.known {
		return entryConsumer[T]{rtc}
	}
	return consumer
}

// Between calls fn between two batches of keys: after every event applied to the known
// objects has been delivered, and before any more is applied. The known objects fn reads
// (through KnownObjects) are exactly those delivered so far, and no event is applied or
// delivered until fn returns; it is how a handler added while running receives the
// current state without missing or repeating an event. The collection is not locked while
// fn runs, so Add, Replace and Synchronize do not wait for it. Functions of concurrent
// Between calls may run at the same time.
func (c *EventQueueCollection[T]) Between(fn func()) { c.backlog.Between(fn) }

// Close stops Drain, and releases NotifyApplied's waiters: Applied is no longer ok. Events
// recorded afterwards are kept but never drained.
func (c *EventQueueCollection[T]) Close() {
	c.backlog.Close()
	c.waiters.close()
}

// HasSynced reports whether every event of the first Replace has been consumed, which,
// with a ResourceTrackingConsumer, means applied to the known objects and handed to the
// handlers.
func (c *EventQueueCollection[T]) HasSynced() bool { return c.backlog.HasSynced() }

// Len returns the number of keys with pending events.
func (c *EventQueueCollection[T]) Len() int { return c.backlog.Len() }

// KnownObjects returns the read-only view of the known objects the collection shares with
// its consumer.
func (c *EventQueueCollection[T]) KnownObjects() *Store[T] { return c.known }
