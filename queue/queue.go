package queue

import (
	"github.com/typedinformer/typedinformer/event"
)

// MaxCompressedLen is the most events a key's queue holds with compression on: a change
// to a known object, its deletion, and a re-creation.
const MaxCompressedLen = 3

// Compression selects how a Backlog merges the pending events of one key.
type Compression uint8

const (
	// Compress applies every rule of the package documentation. It is the default.
	Compress Compression = iota
	// FullHistory keeps every addition and modification so that consumers see every
	// intermediate state; deletions still collapse and cancel as with Compress.
	FullHistory
)

// eventQueue is the ordered list of one key's pending events. Its zero value is not
// usable: the queue must know whether the consumer knew the key before its first event,
// so that it can tell whether an addition followed by a deletion cancels out. Queues are
// created by a fifo.
type eventQueue[T event.Object] struct {
	events []event.Event[T]
	// known says whether the consumer knew the key before the first pending event. It is
	// looked up only when a rule needs it, which saves a lookup of the known objects for
	// most events.
	known knownState
}

type knownState uint8

const (
	knownUnset knownState = iota
	knownNo
	knownYes
)

func (q *eventQueue[T]) knownBefore(lookup func() bool) bool {
	if q.known == knownUnset {
		q.known = knownNo
		if lookup() {
			q.known = knownYes
		}
	}
	return q.known == knownYes
}

// reset empties the queue of a key that is no longer pending, keeping its array, and
// forgets whether the consumer knew the key.
func (q *eventQueue[T]) reset() {
	clear(q.events)
	q.events, q.known = q.events[:0], knownUnset
}

// Events returns the pending events, oldest first. The slice is the queue's own and must
// not be changed.
func (q *eventQueue[T]) Events() []event.Event[T] { return q.events }

// Last returns the newest pending event, if any.
func (q *eventQueue[T]) Last() (event.Event[T], bool) {
	if len(q.events) == 0 {
		return event.Event[T]{}, false
	}
	return q.events[len(q.events)-1], true
}

// knownAt reports whether the consumer will know the key just before events[i] is
// applied.
func (q *eventQueue[T]) knownAt(i int, lookup func() bool) bool {
	if i == 0 {
		return q.knownBefore(lookup)
	}
	return q.events[i-1].Type != event.Deleted
}

// KnownAfter reports whether the consumer will know the key once every pending event has
// been applied.
func (q *eventQueue[T]) KnownAfter() bool {
	if len(q.events) == 0 {
		return q.known == knownYes
	}
	return q.events[len(q.events)-1].Type != event.Deleted
}

// push adds e to a queue that holds at least one event, applying the compression rules
// in one place. (The FIFO applies the rules for a key's first event.)
func (q *eventQueue[T]) push(e event.Event[T], c Compression, lookup func() bool) {
	n := len(q.events)
	last := &q.events[n-1]
	switch e.Type {
	case event.Deleted:
		switch {
		case last.Type == event.Deleted:
			if last.FinalStateUnknown || !e.FinalStateUnknown {
				last.Object, last.Sync, last.FinalStateUnknown = e.Object, e.Sync, e.FinalStateUnknown
			}
		case !q.knownAt(n-1, lookup):
			// Created and deleted again before the consumer saw it: neither matters.
			q.events = q.events[:n-1]
		default:
			q.events = append(q.events, e)
		}
	default: // Added or Modified
		switch {
		case last.Type == event.Deleted:
			if e.Sync && e.Type == event.Modified {
				return
			}
			q.events = append(q.events, e)
		case event.NotNewer(last.Object, e.Object):
			// A duplicate, or an older state arriving late: never replace a newer one.
		case c == FullHistory:
			q.events = append(q.events, e)
		default:
			last.Object = e.Object
			last.Sync = last.Sync && e.Sync
		}
	}
}
