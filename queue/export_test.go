package queue

import "github.com/typedinformer/typedinformer/event"

// Pauses returns the number of Between calls waiting or running, so that tests can tell
// when a Between call is waiting for a batch.
func Pauses[T event.Object](b *Backlog[T]) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pauses
}

// InboxLen returns the number of events pushed and not yet sorted into the FIFO.
func InboxLen[T event.Object](b *Backlog[T]) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.inbox)
}

// MaxInbox is maxInbox, for tests.
const MaxInbox = maxInbox

// ShrinkPeak is shrinkPeak, for tests: a FIFO drops popped keys from its map past
// 4 times the pending keys plus ShrinkPeak.
const ShrinkPeak = shrinkPeak

// FIFO is fifo, for the tests of the compression rules and the line of keys.
type FIFO[T event.Object] = fifo[T]

// NewFIFO is newFIFO, for tests.
func NewFIFO[T event.Object](c Compression, known func(key string, first event.Event[T]) bool) *FIFO[T] {
	return newFIFO(c, known)
}

// KnownFromFirstEvent is knownFromFirstEvent, for tests.
func KnownFromFirstEvent[T event.Object](key string, first event.Event[T]) bool {
	return knownFromFirstEvent(key, first)
}

// MaxInboxDraining is maxInboxDraining, for tests.
const MaxInboxDraining = maxInboxDraining

// NewIndexedFIFO is newIndexedFIFO, for tests.
func NewIndexedFIFO[T event.Object](c Compression, index Index[T]) *FIFO[T] {
	return newIndexedFIFO(c, index)
}

// ReleaseRetiring hands the entries popped so far back to f's index, as a Backlog does
// once its consumer has applied them.
func ReleaseRetiring[T event.Object](f *FIFO[T]) { f.releaseRetiring() }
