package eventcache

import (
	"errors"
	"fmt"
)

// ErrStaleEvent is reported, wrapped, when a watch event carries an object older than the
// one the cache holds; the event is dropped so that the cache never goes back in time.
var ErrStaleEvent = errors.New("stale watch event")

// ErrInvalidEvent is returned, wrapped, by Add for an event with no valid type.
var ErrInvalidEvent = errors.New("invalid event")

// ErrCallbackPanicked is wrapped, with the value and the stack, by the error a user's
// KeyFunc or IndexFunc that panicked is turned into: the object is then one it failed on.
var ErrCallbackPanicked = errors.New("callback panicked")

// MutationError reports a cached object that was changed in place. Objects handed out by
// a Store, a handler's event or a reconciler's request are the cache's own and must be
// treated as read-only (copy them with DeepCopy before changing them): a change made in
// place is seen by every other reader and is lost, or worse, compared against, at the
// next update. A Writer with DetectMutations finds such changes.
type MutationError struct {
	// Key is the key of the mutated object.
	Key string
	// Diff is the change, as go-cmp prints it: - the object as cached, + as it is now.
	// It compares the objects' JSON forms, decoded as generic values (objects are
	// map[string]any, integers int64, other numbers float64), so fields are named as in
	// the object's JSON (or YAML); an object that no longer encodes says so instead.
	Diff string
}

// Error names the key and shows the change.
func (e *MutationError) Error() string {
	return fmt.Sprintf("cached object %s was changed in place; cached objects are read-only, change a DeepCopy (-cached +now):\n%s", e.Key, e.Diff)
}

// ErrMutationDetectorOff is returned by CheckMutations on a Writer that does not detect
// mutations.
var ErrMutationDetectorOff = errors.New("mutation detector off")

// ErrNoIndex is returned, wrapped, when a lookup names an index the store does not have.
var ErrNoIndex = fmt.Errorf("no such index")

// ErrNilIndexFunc is returned, wrapped with the index's name, by Writer.AddIndexers for a
// nil IndexFunc, and by controller.New for one in its Options.Indexers.
var ErrNilIndexFunc = errors.New("nil IndexFunc")

// ErrIndexExists is returned, wrapped, by AddIndexers for an index name the store has.
var ErrIndexExists = errors.New("index already exists")
