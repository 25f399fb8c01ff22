package queue

import "github.com/typedinformer/typedinformer/event"

// FIFO is a set of per-key EventQueues served in the order in which each key first became
// pending. A key is in the FIFO at most once; new events for a pending key join its queue
// without moving it. FIFO is not safe for concurrent use: its owner locks.
//
// A key can be marked when it is pushed; the FIFO counts the marked keys that are still
// pending, which is how owners tell when everything of an initial list has been handed
// on (see Marked).
type FIFO[T event.Object] struct {
	entries     map[string]*entry[T]
	head, tail  *entry[T]
	compression Compression
	known       func(key string, first event.Event[T]) bool
	marked      int
	free        *entry[T]
	nfree       int
}

// maxFree bounds the recycled entries so that a burst of keys does not pin memory after
// it has drained.
const maxFree = 256

type entry[T event.Object] struct {
	key        string
	q          EventQueue[T]
	marked     bool
	prev, next *entry[T]
}

// NewFIFO returns an empty FIFO. known reports whether the consumer knows key before the
// first event of a newly pending key; it is asked once per new pending key.
func NewFIFO[T event.Object](c Compression, known func(key string, first event.Event[T]) bool) *FIFO[T] {
	return &FIFO[T]{entries: make(map[string]*entry[T]), compression: c, known: known}
}

// KnownFromFirstEvent is a known function for consumers whose events are already
// resolved against what they know, such as a handler's backlog: an addition means the
// key was not known, anything else that it was.
func KnownFromFirstEvent[T event.Object](_ string, first event.Event[T]) bool {
	return first.Type != event.Added
}

// Push adds e to key's queue, applying the compression rules, and appends key to the end
// of the line if it was not pending. If mark is true the key is marked until it is popped.
// A push can also cancel the key's pending events, which removes the key from the line.
func (f *FIFO[T]) Push(key string, e event.Event[T], mark bool) {
	en, ok := f.entries[key]
	if !ok {
		en = f.alloc()
		en.key = key
		en.q.knownBefore = f.known(key, e)
	}
	en.q.push(e, f.compression)
	switch {
	case len(en.q.events) == 0 && ok:
		f.remove(en)
	case len(en.q.events) == 0:
		f.release(en)
	case !ok:
		f.entries[key] = en
		en.prev = f.tail
		if f.tail != nil {
			f.tail.next = en
		} else {
			f.head = en
		}
		f.tail = en
		fallthrough
	default:
		if mark && !en.marked {
			en.marked = true
			f.marked++
		}
	}
}

// Pop removes the key that has been pending longest and returns it with its events, oldest
// first, and whether it was marked. ok is false when nothing is pending. The returned slice
// belongs to the caller.
func (f *FIFO[T]) Pop() (key string, events []event.Event[T], marked bool, ok bool) {
	en := f.head
	if en == nil {
		return "", nil, false, false
	}
	key, events, marked = en.key, en.q.events, en.marked
	en.q.events = nil
	f.remove(en)
	return key, events, marked, true
}

// Pending returns key's queue, or nil if nothing is pending for key. The queue must not be
// changed and is valid until the next Push or Pop.
func (f *FIFO[T]) Pending(key string) *EventQueue[T] {
	if en, ok := f.entries[key]; ok {
		return &en.q
	}
	return nil
}

// Keys returns the pending keys in line order.
func (f *FIFO[T]) Keys() []string {
	keys := make([]string, 0, len(f.entries))
	for en := f.head; en != nil; en = en.next {
		keys = append(keys, en.key)
	}
	return keys
}

// Len returns the number of pending keys.
func (f *FIFO[T]) Len() int { return len(f.entries) }

// Marked returns the number of marked keys still pending.
func (f *FIFO[T]) Marked() int { return f.marked }

func (f *FIFO[T]) remove(en *entry[T]) {
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
	delete(f.entries, en.key)
	if en.marked {
		f.marked--
	}
	f.release(en)
}

// alloc and release recycle entries: in steady state every event makes a key pending and
// every pop retires it, so reuse saves an allocation per event.
func (f *FIFO[T]) alloc() *entry[T] {
	if en := f.free; en != nil {
		f.free = en.next
		f.nfree--
		en.next = nil
		return en
	}
	return &entry[T]{}
}

func (f *FIFO[T]) release(en *entry[T]) {
	if f.nfree >= maxFree {
		return
	}
	f.nfree++
	events := en.q.events[:0]
	clear(en.q.events)
	*en = entry[T]{next: f.free}
	en.q.events = events
	f.free = en
}
