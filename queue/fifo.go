package queue

import "github.com/typedinformer/typedinformer/event"

// fifo is a set of per-key eventQueues served in the order in which each key first became
// pending: a Backlog's pending events. A key is in the fifo at most once; new events for a
// pending key join its queue without moving it. A fifo is not safe for concurrent use: its
// Backlog locks.
//
// A key can be marked when it is pushed; the fifo counts the marked keys that are still
// pending, which is how a Backlog tells when everything of its initial state has been
// handed on (see Marked).
type fifo[T event.Object] struct {
	// index, when set, holds the entries (see BacklogOptions.Index): the fifo keeps no map,
	// no popped list and no recycled entries of its own, and retiring holds the entries
	// popped for the batch being consumed, which release hands back to the index.
	index    Index[T]
	retiring []*Entry[T]
	// entries holds the pending keys' entries and the popped ones (see popped), without
	// an index.
	entries    map[string]*Entry[T]
	head, tail *Entry[T]
	pending    int // keys in line
	// popped lists, through prev and next, the entries popped since the FIFO was last
	// empty, which stay in entries: deleting each key from a large map as it is popped
	// costs a cache miss per key, while dropping them all at once when the FIFO empties
	// (see emptied) is a sequential sweep, and a key pushed again meanwhile takes its
	// entry back with no map write. npopped is kept below 4 times the pending keys plus
	// shrinkPeak, so the map stays proportional to the keys pending (see compact).
	popped      *Entry[T]
	npopped     int
	compression Compression
	known       func(key string, first event.Event[T]) bool
	marked      int
	// free recycles entries, with their event slices: in steady state every event makes a
	// key pending and every pop retires it, so reuse saves allocations per event.
	free  *Entry[T]
	nfree int
	// Go maps never shrink, and lookups in a map grown by a burst (an initial list of
	// 100,000 objects) are cache misses ever after; but a map dropped whenever it empties
	// is grown again, allocating, by a consumer that regularly falls that far behind. So an
	// emptied FIFO starts a new map only when the map grew past shrinkPeak keys (grown, the
	// most keys in it since it was made) and the keys in it since it was last empty (peak)
	// used less than a quarter of that: the burst is over.
	grown, peak int
	// rv is the resource version the sorted events have reached (see Backlog.Applied):
	// every event up to it has been pushed. It is 0 unless the Backlog tracks it.
	rv uint64
}

const (
	// shrinkPeak is the size past which a map that a burst grew is worth replacing.
	shrinkPeak = 1024
	// clearPeak is the most popped keys an emptied FIFO deletes from its map one by one;
	// past it, clearing the map is cheaper.
	clearPeak = 256
	// growMin is the smallest burst for which Grow makes a map of the burst's size.
	growMin = 1024
	// maxFree is the most recycled entries a FIFO keeps: enough that a consumer running
	// somewhat behind allocates nothing, few enough that a burst as large as an initial
	// list does not stay pinned.
	maxFree = 4096
)

// newFIFO returns an empty fifo. known reports whether the consumer knows key before first,
// the first event of a newly pending key; it is asked at most once per pending key, and
// only when a compression rule depends on the answer.
func newFIFO[T event.Object](c Compression, known func(key string, first event.Event[T]) bool) *fifo[T] {
	return &fifo[T]{entries: make(map[string]*Entry[T]), compression: c, known: known}
}

// newIndexedFIFO returns an empty fifo whose entries are index's.
func newIndexedFIFO[T event.Object](c Compression, index Index[T]) *fifo[T] {
	return &fifo[T]{index: index, compression: c}
}

// knownFromFirstEvent is the known function of a Backlog whose BacklogOptions.Known is
// nil, for consumers whose events are already resolved against what they know, such as a
// handler's backlog: an addition means the key was not known, anything else that it was.
func knownFromFirstEvent[T event.Object](_ string, first event.Event[T]) bool {
	return first.Type != event.Added
}

// Grow makes room for n more pending keys, so that a burst such as a relist does not
// rehash the map as it grows.
func (f *fifo[T]) Grow(n int) {
	if f.index == nil && len(f.entries) == 0 && n > growMin {
		f.entries = make(map[string]*Entry[T], n)
	}
}

// Push adds e to key's queue, applying the compression rules, and appends key to the end
// of the line if it was not pending. If mark is true the key is marked until it is popped.
// A push can also cancel the key's pending events, which removes the key from the line.
func (f *fifo[T]) Push(key string, e event.Event[T], mark bool) {
	if f.index != nil {
		f.PushEntry(f.index.Entry(key), e, mark)
		return
	}
	en, ok := f.entries[key]
	// lookup answers the queue's question whether the consumer knew the key; it does not
	// escape, so it costs no allocation.
	lookup := func() bool { return f.known(en.key, en.q.events[0]) }
	if !ok || en.out {
		if ok {
			f.unlinkPopped(en) // pushed again since it was popped: it takes its entry back
		} else {
			en = f.alloc()
			en.key = key
		}
		en.q.events = append(en.q.events, e)
		if (e.Type == event.Deleted || e.Sync && e.Type == event.Modified) && !en.q.knownBefore(lookup) {
			// Nothing to delete, or a resync of an object no longer known.
			if ok {
				f.linkPopped(en)
			} else {
				f.release(en)
			}
			return
		}
		if !ok {
			f.entries[key] = en
			f.peak = max(f.peak, len(f.entries))
			f.grown = max(f.grown, f.peak)
		}
		f.link(en)
	} else {
		en.q.push(e, f.compression, lookup)
		if len(en.q.events) == 0 {
			f.remove(en)
			return
		}
	}
	if mark && !en.marked {
		en.marked = true
		f.marked++
	}
}

// PushEntry is Push for a fifo with an index, given the key's entry: the lookup that
// found the entry is the only one of the push. What the consumer knows is the entry's
// object.
func (f *fifo[T]) PushEntry(en *Entry[T], e event.Event[T], mark bool) {
	lookup := func() bool { return en.known }
	if !en.inLine {
		en.q.events = append(en.q.events, e)
		if (e.Type == event.Deleted || e.Sync && e.Type == event.Modified) && !en.q.knownBefore(lookup) {
			// Nothing to delete, or a resync of an object no longer known.
			en.q.reset()
			f.index.Release(en)
			return
		}
		f.link(en)
	} else {
		en.q.push(e, f.compression, lookup)
		if len(en.q.events) == 0 {
			f.unlink(en)
			en.q.reset()
			f.index.Release(en)
			return
		}
	}
	if mark && !en.marked {
		en.marked = true
		f.marked++
	}
}

// link appends en to the line.
func (f *fifo[T]) link(en *Entry[T]) {
	f.pending++
	en.inLine = true
	en.rvBefore = f.rv
	en.prev = f.tail
	if f.tail != nil {
		f.tail.next = en
	} else {
		f.head = en
	}
	f.tail = en
}

// Pop removes the key that has been pending longest and appends its events, oldest first,
// to buf, returning the key, the extended buf and whether the key was marked. ok is false
// when nothing is pending. Passing the previous call's buf[:0] makes popping allocation
// free.
func (f *fifo[T]) Pop(buf []event.Event[T]) (key string, events []event.Event[T], marked bool, ok bool) {
	en := f.head
	if en == nil {
		return "", buf, false, false
	}
	key, events, marked = en.key, append(buf, en.q.events...), en.marked
	f.unlink(en)
	if f.index != nil {
		en.q.reset()
		en.marked = false
		f.retiring = append(f.retiring, en)
		return key, events, marked, true
	}
	f.linkPopped(en)
	if f.pending == 0 {
		f.emptied()
	} else if f.npopped > 4*f.pending+shrinkPeak {
		f.compact()
	}
	return key, events, marked, true
}

// Pending returns key's queue, or nil if nothing is pending for key. The queue must not be
// changed and is valid until the next Push or Pop.
func (f *fifo[T]) Pending(key string) *eventQueue[T] {
	if f.index != nil {
		if en := f.index.Lookup(key); en != nil && en.inLine {
			return &en.q
		}
		return nil
	}
	if en, ok := f.entries[key]; ok && !en.out {
		return &en.q
	}
	return nil
}

// Range calls fn for each pending key in line order until fn returns false. fn must not
// change the FIFO.
func (f *fifo[T]) Range(fn func(key string, q *eventQueue[T]) bool) {
	for en := f.head; en != nil; en = en.next {
		if !fn(en.key, &en.q) {
			return
		}
	}
}

// Keys returns the pending keys in line order.
func (f *fifo[T]) Keys() []string {
	keys := make([]string, 0, f.pending)
	for en := f.head; en != nil; en = en.next {
		keys = append(keys, en.key)
	}
	return keys
}

// Clear drops every pending key and event, and the recycled entries, so that nothing the
// FIFO held stays reachable through it.
func (f *fifo[T]) Clear() {
	if f.index != nil {
		f.releaseRetiring()
		for en := f.head; en != nil; en = f.head {
			f.unlink(en)
			en.q.reset()
			en.marked = false
			f.index.Release(en)
		}
		return
	}
	*f = fifo[T]{entries: make(map[string]*Entry[T]), compression: f.compression, known: f.known, rv: f.rv}
}

// watermark returns the resource version up to which every pushed event has been popped
// or dropped: the head's rvBefore, or rv when nothing is pending.
func (f *fifo[T]) watermark() uint64 {
	if f.head != nil {
		return f.head.rvBefore
	}
	return f.rv
}

// listed sets rv to a list's resource version, lower or not: a relist's state replaces
// what was applied before it. Pending keys that became pending past it are lowered to it,
// since the events up to their rvBefore now include the list's, behind them in line.
func (f *fifo[T]) listed(rv uint64) {
	f.rv = rv
	for en := f.head; en != nil; en = en.next {
		en.rvBefore = min(en.rvBefore, rv)
	}
}

// Len returns the number of pending keys.
func (f *fifo[T]) Len() int { return f.pending }

// Marked returns the number of marked keys still pending.
func (f *fifo[T]) Marked() int { return f.marked }

// remove drops a pending key whose events cancelled out.
func (f *fifo[T]) remove(en *Entry[T]) {
	f.unlink(en)
	delete(f.entries, en.key)
	f.release(en)
	if f.pending == 0 {
		f.emptied()
	}
}

// unlink takes en out of line.
func (f *fifo[T]) unlink(en *Entry[T]) {
	if en.prev != nil {
		en.prev.next = en.next
	} else {
		f.head = en.next
	}
	if en.next != nil {
		en.next.prev = en.prev
	} else {
		f.tail = en.prev
	}
	en.prev, en.next, en.inLine = nil, nil, false
	f.pending--
	if en.marked {
		f.marked--
	}
}

// linkPopped empties en's queue and adds it to the popped list; it stays in entries.
func (f *fifo[T]) linkPopped(en *Entry[T]) {
	clear(en.q.events)
	*en = Entry[T]{key: en.key, q: eventQueue[T]{events: en.q.events[:0]}, out: true, next: f.popped}
	if f.popped != nil {
		f.popped.prev = en
	}
	f.popped = en
	f.npopped++
}

// unlinkPopped takes en, with its empty queue, out of the popped list.
func (f *fifo[T]) unlinkPopped(en *Entry[T]) {
	if en.prev != nil {
		en.prev.next = en.next
	} else {
		f.popped = en.next
	}
	if en.next != nil {
		en.next.prev = en.prev
	}
	en.prev, en.next, en.out = nil, nil, false
	f.npopped--
}

// emptied drops the popped entries once nothing is pending, and the map itself when a
// burst that is over grew it.
func (f *fifo[T]) emptied() {
	switch {
	case f.grown > shrinkPeak && f.peak < f.grown/4:
		f.entries = make(map[string]*Entry[T])
		f.grown = 0
	case f.npopped <= clearPeak:
		for en := f.popped; en != nil; en = en.next {
			delete(f.entries, en.key)
		}
	default:
		clear(f.entries)
	}
	f.peak = 0
	f.releasePopped()
}

// compact makes a new map of the pending keys alone, when the popped ones far outnumber
// them: it costs one insertion per pending key, fewer than the popped keys it drops.
func (f *fifo[T]) compact() {
	m := make(map[string]*Entry[T], f.pending)
	for en := f.head; en != nil; en = en.next {
		m[en.key] = en
	}
	f.entries = m
	f.peak, f.grown = f.pending, f.pending
	f.releasePopped()
}

// releasePopped recycles the popped entries, which are no longer in entries.
func (f *fifo[T]) releasePopped() {
	en := f.popped
	f.popped, f.npopped = nil, 0
	for en != nil && f.nfree < maxFree {
		next := en.next
		f.release(en)
		en = next
	}
}

func (f *fifo[T]) alloc() *Entry[T] {
	if en := f.free; en != nil {
		f.free = en.next
		f.nfree--
		en.next = nil
		return en
	}
	if en := f.popped; en != nil {
		// Rather than allocate, take back a popped key's entry: pushes and pops interleave
		// while a list drains, and a new entry per key would double its memory.
		f.unlinkPopped(en)
		delete(f.entries, en.key)
		clear(en.q.events)
		*en = Entry[T]{q: eventQueue[T]{events: en.q.events[:0]}}
		return en
	}
	en := &Entry[T]{}
	en.q.events = en.first[:0]
	return en
}

func (f *fifo[T]) release(en *Entry[T]) {
	if f.nfree >= maxFree {
		return
	}
	clear(en.q.events)
	*en = Entry[T]{q: eventQueue[T]{events: en.q.events[:0]}, next: f.free}
	f.free = en
	f.nfree++
}

// releaseRetiring hands the entries popped since the last call back to the index, once
// the consumer has applied their events: the index drops those that hold no object.
func (f *fifo[T]) releaseRetiring() {
	for _, en := range f.retiring {
		if !en.inLine {
			f.index.Release(en)
		}
	}
	clear(f.retiring)
	f.retiring = f.retiring[:0]
}
