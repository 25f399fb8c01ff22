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
// delivered, and Replace never sees half-applied events.
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
	"sync"

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

// Consumer receives each key's pending events, oldest first, from the drain loop: Apply,
// with the collection locked, brings the known objects up to date, so that Replace and
// Synchronize always see them consistent with the pending queues; Deliver, with the
// collection unlocked, hands the events on, so that the reflector's Add does not wait for
// delivery. Every Apply is followed by exactly one Deliver of the events it returned,
// before the next Apply. When Apply returned errors, Report gets them after Deliver, once
// the key no longer counts as being consumed and nothing is locked, so that what reports
// them may call Between (add a handler) or record events.
type Consumer[T event.Object] interface {
	Apply(key string, events []event.Event[T]) ([]event.Event[T], []error)
	Deliver(key string, events []event.Event[T])
	Report(key string, errs []error)
}

// ErrInvalidEvent is returned, wrapped, by Add for an event with no valid type.
var ErrInvalidEvent = errors.New("invalid event")

// ErrClosed is returned by Drain when the collection was closed.
var ErrClosed = errors.New("event queue collection closed")

// Options configure an EventQueueCollection.
type Options[T event.Object] struct {
	// KeyFunc computes keys; event.ObjectKey when nil.
	KeyFunc event.KeyFunc[T]
	// Compression selects the compression rules; queue.Compress by default.
	Compression queue.Compression
	// OnSynced, when set, is called once, with the collection's lock held, right after
	// everything of the first Replace has been consumed.
	OnSynced func()
	// Depth, when set, is called with the number of pending keys after every change.
	Depth func(pendingKeys int)
}

// EventQueueCollection is the stock EventCache: one ordered queue of pending events per
// key, drained in the order in which keys became pending by a single Drain loop. See the
// queue package for the compression rules that bound its memory by the number of keys.
type EventQueueCollection[T event.Object] struct {
	mu sync.Mutex
	// cond wakes the drain loop: something is pending, the collection closed, or a
	// Between ended. idle wakes Between: no key is being consumed any more.
	cond    sync.Cond
	idle    sync.Cond
	fifo    *queue.FIFO[T]
	known   *Store[T]
	keyFunc event.KeyFunc[T]
	opts    Options[T]

	populated      bool // the first Replace happened
	synced         bool
	closed         bool
	inflightMarked bool // a key of the first Replace is being delivered
	consuming      bool // a key is between its Apply and its Deliver's end
	pauses         int  // Between calls waiting or running: the drain loop holds off
	buf            []event.Event[T]
}

// NewEventQueueCollection returns an empty collection that reads the known objects from
// known. The consumer that drains it must hold known's Writer.
func NewEventQueueCollection[T event.Object](known *Store[T], opts Options[T]) *EventQueueCollection[T] {
	c := &EventQueueCollection[T]{known: known, keyFunc: opts.KeyFunc, opts: opts}
	if c.keyFunc == nil {
		c.keyFunc = event.ObjectKey[T]
	}
	c.cond.L = &c.mu
	c.idle.L = &c.mu
	c.fifo = queue.NewFIFO(opts.Compression, func(key string, _ event.Event[T]) bool {
		return known.has(key)
	})
	return c
}

// Add records one watch event. It returns an error, and records nothing, for an event
// with an invalid type or an object that has no key.
func (c *EventQueueCollection[T]) Add(e event.Event[T]) error {
	if e.Type < event.Added || e.Type > event.Deleted {
		return fmt.Errorf("%w: type %v", ErrInvalidEvent, e.Type)
	}
	key, err := c.keyFunc(e.Object)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	c.mu.Lock()
	c.fifo.Push(key, e, false)
	c.changed()
	c.mu.Unlock()
	return nil
}

// Replace records a list, atomically: a synchronization addition for every listed
// object and, when the list is CompleteList, a final-state-unknown deletion, carrying the
// newest state known or pending, for every key that is known or pending but not listed.
//
// Objects that have no key are skipped and reported in the returned error, and make the
// list incomplete. An incomplete list synthesises no deletion (this deviates from DESIGN
// 5, see the package doc): a missing key may belong to an object that is alive but could
// not be read, and deleting it would tell the handlers a live object is gone.
func (c *EventQueueCollection[T]) Replace(objects []T, _ string, completeness ListCompleteness) error {
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

	c.mu.Lock()
	defer c.mu.Unlock()
	mark := !c.populated
	// With nothing known or pending, as on the first list, nothing can be gone; from an
	// incomplete list, nothing is known to be gone.
	var listed map[string]struct{}
	deletes := completeness == CompleteList && (c.known.Len() > 0 || c.fifo.Len() > 0)
	if deletes {
		listed = make(map[string]struct{}, len(keys))
		for _, key := range keys {
			listed[key] = struct{}{}
		}
	}
	c.fifo.Grow(len(objects))
	if c.known.Len() == 0 {
		c.known.reserve(objects)
	}
	for i, obj := range objects {
		c.fifo.Push(keys[i], event.Event[T]{Type: event.Added, Object: obj, Sync: true}, mark)
	}
	if deletes {
		var gone []event.Event[T]
		var goneKeys []string
		c.known.Range(func(key string, obj T) bool {
			if _, ok := listed[key]; !ok {
				goneKeys = append(goneKeys, key)
				gone = append(gone, event.Event[T]{Type: event.Deleted, Object: obj, Sync: true, FinalStateUnknown: true})
			}
			return true
		})
		c.fifo.Range(func(key string, _ *queue.EventQueue[T]) bool {
			if _, ok := listed[key]; !ok && !c.known.has(key) {
				goneKeys = append(goneKeys, key)
				gone = append(gone, event.Event[T]{Type: event.Deleted, Sync: true, FinalStateUnknown: true})
			}
			return true
		})
		for i, key := range goneKeys {
			e := gone[i]
			if q := c.fifo.Pending(key); q != nil {
				if last, ok := q.Last(); ok && last.Type != event.Deleted {
					e.Object = last.Object // the newest state the pipeline has seen
				}
			}
			c.fifo.Push(key, e, mark)
		}
	}
	c.populated = true
	c.changed()
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
	c.mu.Lock()
	defer c.mu.Unlock()
	var keys []string
	var objs []T
	c.known.Range(func(key string, obj T) bool {
		if c.fifo.Pending(key) == nil {
			keys, objs = append(keys, key), append(objs, obj)
		}
		return true
	})
	for i, key := range keys {
		c.fifo.Push(key, event.Event[T]{Type: event.Modified, Object: objs[i], Sync: true}, false)
	}
	c.changed()
	return nil
}

// changed wakes the drain loop and updates the synced state. Called with mu held.
func (c *EventQueueCollection[T]) changed() {
	if !c.synced && c.populated && c.fifo.Marked() == 0 && !c.inflightMarked {
		c.synced = true
		if c.opts.OnSynced != nil {
			c.opts.OnSynced()
		}
	}
	if c.opts.Depth != nil {
		c.opts.Depth(c.fifo.Len())
	}
	c.cond.Signal()
}

// Drain is the single drain loop: it hands each pending key's events, in line order, to
// consumer (Apply with the collection locked, Deliver unlocked). It returns when ctx is
// done (with ctx.Err()) or the collection is closed (with ErrClosed). Only one Drain may
// run at a time.
func (c *EventQueueCollection[T]) Drain(ctx context.Context, consumer Consumer[T]) error {
	// The wake-up on cancellation runs in a goroutine of its own; Drain waits for it, so
	// that nothing of the collection outlives the drain loop.
	var wake sync.WaitGroup
	wake.Add(1)
	stop := context.AfterFunc(ctx, func() {
		defer wake.Done()
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer func() {
		if stop() {
			wake.Done()
		}
		wake.Wait()
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for (c.fifo.Len() == 0 || c.pauses > 0) && !c.closed && ctx.Err() == nil {
			c.cond.Wait()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.closed {
			return ErrClosed
		}
		c.consumeOne(consumer)
	}
}

// consumeOne hands the longest-pending key to consumer. Called with mu held; it releases
// mu while the events are delivered and reported.
func (c *EventQueueCollection[T]) consumeOne(consumer Consumer[T]) bool {
	key, events, marked, ok := c.fifo.Pop(c.buf[:0])
	if !ok {
		return false
	}
	c.buf = events
	c.inflightMarked = marked
	c.consuming = true
	events, errs := consumer.Apply(key, events)
	c.changed()
	c.mu.Unlock()
	consumer.Deliver(key, events)
	c.mu.Lock()
	c.consuming = false
	if c.pauses > 0 {
		c.idle.Broadcast()
	}
	if marked {
		c.inflightMarked = false
		c.changed()
	}
	if len(errs) > 0 {
		c.mu.Unlock()
		consumer.Report(key, errs)
		c.mu.Lock()
	}
	return true
}

// Between calls fn between two keys: after every event applied to the known objects has
// been delivered, and before any more is applied. The known objects fn reads (through
// KnownObjects) are exactly those delivered so far, and no event is applied or delivered
// until fn returns; it is how a handler added while running receives the current state
// without missing or repeating an event. The collection is not locked while fn runs, so
// Add, Replace and Synchronize do not wait for it. Functions of concurrent Between calls
// may run at the same time.
func (c *EventQueueCollection[T]) Between(fn func()) {
	c.mu.Lock()
	c.pauses++
	for c.consuming {
		c.idle.Wait()
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.pauses--
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	fn()
}

// Close stops Drain. Events recorded afterwards are kept but never drained.
func (c *EventQueueCollection[T]) Close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

// HasSynced reports whether every event of the first Replace has been consumed, which,
// with a ResourceTrackingConsumer, means applied to the known objects and handed to the
// handlers.
func (c *EventQueueCollection[T]) HasSynced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.synced
}

// Len returns the number of keys with pending events.
func (c *EventQueueCollection[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fifo.Len()
}

// KnownObjects returns the read-only view of the known objects the collection shares with
// its consumer.
func (c *EventQueueCollection[T]) KnownObjects() *Store[T] { return c.known }
