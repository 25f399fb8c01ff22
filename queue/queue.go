// Package queue holds the per-key pending events of the pipeline and the rules that
// compress them.
//
// An [EventQueue] is one key's ordered pending events. A [FIFO] is a set of EventQueues,
// one per key, ordered by the time each key first became pending: new events for a
// pending key join that key's queue and do not move it in line. Both are plain data
// structures with no locking. A [Backlog] is the stage built on them, written once and
// used twice: the event cache drains one into the consumer that keeps the known objects,
// and every handler drains one of its own into the handler. It owns the lock, the drain
// loop (in batches of keys), the initial-sync tracking and the pauses between batches.
//
// # Lock order
//
// A Backlog has two locks: its inbox lock, held by a push only to append, and its FIFO
// lock, held while the inbox is sorted into the FIFO, a batch is taken and applied, and
// Update's function runs. The pipeline's locks nest in one order only:
//
//	Backlog's FIFO lock -> the same Backlog's inbox lock
//	event cache's Backlog (FIFO lock) -> known objects' Store
//	Controller -> handler list -> handler's Backlog (inbox lock)
//	handler's Backlog (FIFO lock) -> known objects' Store (read, to hand a new handler the current state)
//
// Consumer.Apply, Update's function and BacklogOptions.Key and Known run with the FIFO
// lock held; they may take the store's lock, never a Backlog's, and nothing holds the
// store's lock while it takes a Backlog's. Nothing else a Backlog calls runs with a lock
// of its held: Consumer.Deliver (which pushes into the handlers' Backlogs),
// Consumer.Report, OnSynced and Depth run unlocked, so user code they reach (handlers,
// metrics, error reporters) may call back into the pipeline.
//
// Compression keeps a stalled consumer's memory proportional to the number of distinct
// keys, never to the number of events. With compression on, a key never has more than
// [MaxCompressedLen] pending events. The rules, applied as each event arrives:
//
//   - An addition or modification after a pending addition or modification replaces that
//     event's object with the newer one (the type, and the prior state, of the earlier
//     event are kept, so the consumer still sees one change from what it knew). One that
//     is not newer, by resource version (see event.NotNewer), is dropped.
//   - Two deletions collapse into one; a deletion with a known final state wins over one
//     whose final state is unknown.
//   - A synchronization (resync) modification is dropped when the last pending event is
//     a deletion, so a resync never resurrects a deleted object.
//   - An addition followed by a deletion of a key the consumer does not know cancels out:
//     neither is delivered.
//   - A deletion of a key the consumer does not know and that has nothing pending is
//     dropped: there is nothing to delete.
//
// With [FullHistory], modifications are not merged, so every intermediate state is
// delivered; memory then grows with the number of events while the consumer stalls.
package queue

import (
	"github.com/typedinformer/typedinformer/event"
)

// MaxCompressedLen is the most events a key's queue holds with compression on: a change
// to a known object, its deletion, and a re-creation.
const MaxCompressedLen = 3

// Compression selects how a queue merges the events of one key.
type Compression uint8

const (
	// Compress applies every rule of the package documentation. It is the default.
	Compress Compression = iota
	// FullHistory keeps every addition and modification so that consumers see every
	// intermediate state; deletions still collapse and cancel as with Compress.
	FullHistory
)

// EventQueue is the ordered list of one key's pending events. Its zero value is not
// usable: the queue must know whether the consumer knew the key before its first event,
// so that it can tell whether an addition followed by a deletion cancels out. Create
// queues through a FIFO.
type EventQueue[T event.Object] struct {
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

func (q *EventQueue[T]) knownBefore(lookup func() bool) bool {
	if q.known == knownUnset {
		q.known = knownNo
		if lookup() {
			q.known = knownYes
		}
	}
	return q.known == knownYes
}

// Events returns the pending events, oldest first. The slice is the queue's own and must
// not be changed.
func (q *EventQueue[T]) Events() []event.Event[T] { return q.events }

// Last returns the newest pending event, if any.
func (q *EventQueue[T]) Last() (event.Event[T], bool) {
	if len(q.events) == 0 {
		return event.Event[T]{}, false
	}
	return q.events[len(q.events)-1], true
}

// knownAt reports whether the consumer will know the key just before events[i] is
// applied.
func (q *EventQueue[T]) knownAt(i int, lookup func() bool) bool {
	if i == 0 {
		return q.knownBefore(lookup)
	}
	return q.events[i-1].Type != event.Deleted
}

// KnownAfter reports whether the consumer will know the key once every pending event has
// been applied.
func (q *EventQueue[T]) KnownAfter() bool {
	if len(q.events) == 0 {
		return q.known == knownYes
	}
	return q.events[len(q.events)-1].Type != event.Deleted
}

// push adds e to a queue that holds at least one event, applying the compression rules
// in one place. (The FIFO applies the rules for a key's first event.)
func (q *EventQueue[T]) push(e event.Event[T], c Compression, lookup func() bool) {
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
