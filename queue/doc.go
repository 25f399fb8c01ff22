// Package queue holds the pipeline's keyed-backlog stage, [Backlog], and the rules that
// compress the pending events of a key.
//
// A Backlog is written once and used twice: the event cache drains one into the consumer
// that keeps the known objects, and every handler drains one of its own into the
// handler. It holds each key's pending events in order, serves keys in the order in which
// each first became pending (new events for a pending key join that key's events and do
// not move it in line), and owns the lock, the drain loop (in batches of keys, to a
// [Consumer]), the initial-sync tracking and the pauses between batches ([Backlog.Between]).
// Its callers hand it whole events, each carrying its key in event.Event.Key: one at a
// time ([Backlog.Push]), a batch at a time ([Backlog.PushBatch]), or, atomically with the
// consumer's Apply, as many as a relist or a new handler's initial state needs
// ([Backlog.Update], through [Pending]). The per-key queues, the line of keys and the
// marks that track the initial sync are the Backlog's own.
//
// # Keys
//
// A Backlog computes no key of its own. An event arrives with its key, or, pushed with an
// empty key, gets it from [BacklogOptions].Key (or [Index].EntryOf) on the goroutine that
// sorts the inbox (normally the drain loop), so that a pusher such as the reflector does
// no per-key work. The event cache uses that for its default key function (see
// eventcache.Options.KeyFunc): its Add checks that the object has a key, and its Backlog's
// drain loop builds the key string. Either way a key is computed once, and every stage
// after it, down to the handlers and the reconcile loop, reads it from event.Event.Key.
//
// # Entries
//
// Each pending key has an [Entry]: its key string, its events and its place in line. A
// Backlog keeps them in a map of its own, unless its owner keeps one entry per key itself
// ([BacklogOptions].Index): the event cache's known objects are such an index, each entry
// holding the key's known object besides its pending events, so that sorting an event
// costs one lookup of its key and applying it none ([EntryConsumer]).
//
// # Lock order
//
// A Backlog has two locks: its inbox lock, held by a push only to append, and its lock of
// the pending events, held while the inbox is sorted into them, a batch is taken and
// applied, and Update's function runs. The pipeline's locks nest in one order only:
//
//	Backlog's pending-events lock -> the same Backlog's inbox lock
//	event cache's Backlog (pending-events lock) -> known objects' Store
//	Controller -> handler list -> handler's Backlog (inbox lock)
//	handler's Backlog (pending-events lock) -> known objects' Store (read, to hand a new handler the current state)
//
// Consumer.Apply (and ApplyEntries), Update's function, BacklogOptions.Key and Known, and
// the Index's methods run with the pending-events lock held; they may take the store's lock, never a Backlog's, and
// nothing holds the store's lock while it takes a Backlog's. Nothing else a Backlog calls
// runs with a lock of its held: Consumer.Deliver (which pushes into the handlers'
// Backlogs), Consumer.Report, OnSynced and Depth run unlocked, so user code they reach
// (handlers, metrics, error reporters) may call back into the pipeline.
//
// # Compression
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
