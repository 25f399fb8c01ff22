package eventcache

import (
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// entryIndex is the queue.Index of an EventQueueCollection's backlog: the entries of its
// Store, which hold each key's known object and pending events together, so that the
// drain loop finds both, and the key string, with one lookup per event. The backlog calls
// it with its pending-events lock held, and the consumer that writes the store's objects
// runs with that lock held too, so the map changes it makes (adding the entry of a newly
// pending key, removing that of a key neither known nor pending) are the only ones
// besides the consumer's; it takes the store's lock for them, for the readers.
type entryIndex[T event.Object] struct{ s *Store[T] }

// Entry returns key's entry, adding one.
func (x entryIndex[T]) Entry(key string) *queue.Entry[T] {
	if en := x.Lookup(key); en != nil {
		return en
	}
	return x.add(key)
}

// EntryOf returns the entry of the key event.ObjectKey gives obj, which Add has checked
// has one, adding one. A namespaced object's key is looked up from bytes on the stack, so
// that only a key the store has no entry for allocates a key string.
func (x entryIndex[T]) EntryOf(obj T) *queue.Entry[T] {
	ns, name := obj.GetNamespace(), obj.GetName()
	if ns == "" {
		return x.Entry(name)
	}
	var buf [128]byte
	b := append(append(append(buf[:0], ns...), '/'), name...)
	x.s.mu.RLock()
	en := x.s.items[string(b)]
	x.s.mu.RUnlock()
	if en != nil {
		return en
	}
	return x.add(string(b))
}

// Lookup returns key's entry, or nil.
func (x entryIndex[T]) Lookup(key string) *queue.Entry[T] {
	x.s.mu.RLock()
	en := x.s.items[key]
	x.s.mu.RUnlock()
	return en
}

// add adds an entry for key, which has none.
func (x entryIndex[T]) add(key string) *queue.Entry[T] {
	en := queue.NewEntry[T](key)
	x.s.mu.Lock()
	x.s.items[key] = en
	x.s.mu.Unlock()
	return en
}

// Release removes en, whose key has nothing pending, unless it holds the key's object. An
// entry the consumer already replaced (deleted, then added again in one batch) is gone
// from the map and left alone.
func (x entryIndex[T]) Release(en *queue.Entry[T]) {
	if _, known := en.Object(); known || en.Pending() {
		return
	}
	x.s.mu.Lock()
	if x.s.items[en.Key()] == en {
		delete(x.s.items, en.Key())
	}
	x.s.mu.Unlock()
}
