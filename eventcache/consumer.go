package eventcache

import (
	"fmt"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// Sink receives the events the consumer resolved, a batch at a time, in order; each event
// carries its key in Event.Key. Deliver must not block (handlers keep their own backlogs)
// and must not keep the slice, which the consumer reuses.
type Sink[T event.Object] interface {
	Deliver(batch []event.Event[T])
}

// SinkFunc adapts a plain function to a Sink.
type SinkFunc[T event.Object] func(batch []event.Event[T])

// Deliver calls f.
func (f SinkFunc[T]) Deliver(batch []event.Event[T]) { f(batch) }

// ResourceTrackingConsumer applies each key's events to the known objects and only then
// passes each event on to its Sink, rewritten against what it knew:
//
//   - an addition or modification of a known key is delivered as a modification whose
//     Prior is the state it replaces, unless it is a different object (another UID): then
//     the old one is delivered as a final-state-unknown deletion and the new one as an
//     addition;
//   - an addition or modification of an unknown key is delivered as an addition;
//   - a deletion removes the key and is delivered with Prior set to the last known state
//     (and Object, when the deletion was synthesised, to that same state); a deletion of
//     an unknown key is not delivered;
//   - a watch event that repeats the known state, or carries an older one (by resource
//     version, when both are integers), is dropped: duplicates are not delivered twice and
//     the cache never goes back in time. Older ones are reported as ErrStaleEvent.
//
// It is a queue.Consumer: its methods are called by a single drain loop, one batch at a
// time.
type ResourceTrackingConsumer[T event.Object] struct {
	w       *Writer[T]
	sink    Sink[T]
	onError func(error)
}

// NewResourceTrackingConsumer returns a consumer that is the only writer of w's store and
// delivers to sink. onError, when not nil, receives index function errors (the object is
// stored regardless), stale watch events and, when w detects mutations, the cached objects
// found changed in place (*MutationError) and the first object found not to encode as
// JSON (see Writer.DetectMutations); it is called from Report, once the key's
// events are delivered and nothing is locked, so it may add or remove handlers.
func NewResourceTrackingConsumer[T event.Object](w *Writer[T], sink Sink[T], onError func(error)) *ResourceTrackingConsumer[T] {
	return &ResourceTrackingConsumer[T]{w: w, sink: sink, onError: onError}
}

// Apply applies events, oldest first, each to the known object of its Event.Key, and
// returns them rewritten against what was known (in place), without deletions of unknown
// keys, and the errors it found, for Report.
func (c *ResourceTrackingConsumer[T]) Apply(events []event.Event[T]) ([]event.Event[T], []error) {
	return c.apply(events, nil)
}

// entryConsumer is a ResourceTrackingConsumer drained from the collection whose Store its
// Writer writes: it applies each key's events to the entry the backlog found for them
// (see entryIndex), without a lookup of its own.
type entryConsumer[T event.Object] struct {
	*ResourceTrackingConsumer[T]
}

// ApplyEntries is Apply, given the entries of the batch's keys, in order.
func (c entryConsumer[T]) ApplyEntries(events []event.Event[T], entries []*queue.Entry[T]) ([]event.Event[T], []error) {
	return c.apply(events, entries)
}

// apply is Apply; entries, when not nil, are the entries of the events' keys in the
// order in which their events come (see queue.EntryConsumer).
func (c *ResourceTrackingConsumer[T]) apply(events []event.Event[T], entries []*queue.Entry[T]) (_ []event.Event[T], errs []error) {
	var zero T
	out := events[:0]
	fresh := false // out no longer shares events' array
	k := 0         // entries[k] is the entry of the current key, if any
	for _, e := range events {
		key := e.Key
		var en *queue.Entry[T]
		if entries != nil {
			for k < len(entries) && entries[k].Key() != key {
				k++
			}
			if k < len(entries) {
				en = entries[k]
			}
		}
		switch e.Type {
		case event.Added, event.Modified:
			prior, existed, recreated, stale, err := c.w.set(en, key, e.Object, !e.Sync)
			if stale {
				if prior.GetResourceVersion() != e.Object.GetResourceVersion() {
					errs = append(errs, fmt.Errorf("%w: %s %s at resource version %s, the cache has %s",
						ErrStaleEvent, e.Type, key, e.Object.GetResourceVersion(), prior.GetResourceVersion()))
				}
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("indexing %s: %w", key, err))
			}
			switch {
			case recreated:
				// Deleted and created again while the watch was down: the handlers get the
				// deletion of the old object, then the new one as an addition. Two events
				// for one would overwrite events not yet read, so out moves to its own
				// array (rarely: only relists see this).
				if !fresh {
					out, fresh = append([]event.Event[T](nil), out...), true
				}
				out = append(out, event.Event[T]{Type: event.Deleted, Key: key, Object: prior, Prior: prior, Sync: e.Sync, FinalStateUnknown: true})
				e.Type, e.Prior = event.Added, zero
			case existed:
				e.Type, e.Prior = event.Modified, prior
			default:
				e.Type, e.Prior = event.Added, zero
			}
		case event.Deleted:
			prior, existed := c.w.delete(en, key)
			if !existed {
				continue
			}
			e.Prior = prior
			if e.FinalStateUnknown || e.Object == zero {
				e.Object = prior
			}
		default:
			continue
		}
		out = append(out, e)
	}
	return out, append(errs, c.w.takeMutations()...)
}

// Deliver passes events, as Apply returned them, to the sink.
func (c *ResourceTrackingConsumer[T]) Deliver(events []event.Event[T]) {
	if len(events) > 0 {
		c.sink.Deliver(events)
	}
}

// Report hands the errors Apply found to the consumer's error function.
func (c *ResourceTrackingConsumer[T]) Report(errs []error) {
	if c.onError == nil {
		return
	}
	for _, err := range errs {
		c.onError(err)
	}
}
