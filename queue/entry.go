package queue

import "github.com/typedinformer/typedinformer/event"

// Entry is one key's entry in a Backlog: the key string, the key's pending events and
// its place in line. A Backlog whose owner keeps an Entry per key itself
// (BacklogOptions.Index) also finds there the object the owner keeps for the key (the
// event cache's known object), so that one lookup per event finds the key string, the
// pending state and the known object at once. A Backlog without an Index keeps entries
// of its own, whose object is unused.
//
// The Backlog writes the pending part with its pending-events lock held; the owner
// writes the object (SetObject, ClearObject) with that lock held too, from
// Consumer.Apply or Update's function, so that the compression rules, which ask whether
// the consumer knows a key, read it consistent with the pending events.
type Entry[T event.Object] struct {
	key string
	q   eventQueue[T]
	// obj is the owner's object for the key, when known is true (see Index); namespace
	// and version are the owner's notes on it (see SetObject).
	obj       T
	namespace string
	version   uint64
	uid       [16]byte
	known     bool
	marked    bool
	// inLine says the key is pending: in the line between head and tail.
	inLine bool
	// out says a popped entry of a Backlog without an Index: in its map and its popped
	// list, not in line.
	out bool
	// rvBefore is the fifo's rv when the key became pending. Keys are served in the order
	// they became pending, so it never decreases along the line, and every event up to the
	// head's rvBefore belongs to a key ahead of the head: one already popped.
	rvBefore   uint64
	prev, next *Entry[T]
	// first holds q's events while there is one, as there is for most keys, so that a
	// newly pending key costs one allocation, not two.
	first [1]event.Event[T]
}

// NewEntry returns an entry for key that holds no object and nothing pending, for an
// Index to add.
func NewEntry[T event.Object](key string) *Entry[T] {
	en := &Entry[T]{key: key}
	en.q.events = en.first[:0]
	return en
}

// Key returns the entry's key.
func (en *Entry[T]) Key() string { return en.key }

// Object returns the object the owner keeps for the key, and whether it keeps one.
func (en *Entry[T]) Object() (T, bool) { return en.obj, en.known }

// SetObject makes obj the object the owner keeps for the key, with three notes on it
// that the owner can read back without reading obj, a miss in the CPU's caches with many
// objects: its namespace (a string the owner may share across entries), its resource
// version as event.Version gives it (0 when it has none) and its UID as event.UIDNote
// gives it (zero when it has none).
func (en *Entry[T]) SetObject(obj T, namespace string, version uint64, uid [16]byte) {
	en.obj, en.namespace, en.version, en.uid, en.known = obj, namespace, version, uid, true
}

// ClearObject drops the object the owner keeps for the key.
func (en *Entry[T]) ClearObject() {
	var zero T
	en.obj, en.namespace, en.version, en.uid, en.known = zero, "", 0, [16]byte{}, false
}

// Namespace returns the namespace SetObject noted.
func (en *Entry[T]) Namespace() string { return en.namespace }

// Version returns the resource version SetObject noted, 0 when there is none.
func (en *Entry[T]) Version() uint64 { return en.version }

// UID returns the UID note SetObject took, zero when there is none.
func (en *Entry[T]) UID() [16]byte { return en.uid }

// Pending reports whether events of the key are pending (the key is in line). Popped
// keys are not pending while the consumer applies them.
func (en *Entry[T]) Pending() bool { return en.inLine }

// Index is where a Backlog finds the entries of keys, when its owner keeps them (see
// BacklogOptions.Index): the event cache keeps one map of entries for the known objects
// and the pending events together. The Backlog calls it with its pending-events lock
// held, from the goroutine that sorts the inbox or runs Update's function; its methods
// must not call the Backlog.
//
// With an Index, the consumer knows a key when the key's entry holds an object
// (Entry.Object): BacklogOptions.Known is not used.
type Index[T event.Object] interface {
	// Entry returns key's entry, adding a new one (NewEntry) when key has none.
	Entry(key string) *Entry[T]
	// EntryOf returns the entry of obj's key, adding one when the key has none, for an
	// event pushed with an empty Event.Key: the Index computes the key (BacklogOptions.Key
	// is not used). It returns the entry whose Key is the key string events carry on.
	EntryOf(obj T) *Entry[T]
	// Lookup returns key's entry, or nil when key has none.
	Lookup(key string) *Entry[T]
	// Release is called for an entry whose key has nothing pending any more: its events
	// were consumed (after Consumer.Apply), cancelled out or dropped. The Index removes
	// the entry unless it keeps an object for the key.
	Release(en *Entry[T])
}
