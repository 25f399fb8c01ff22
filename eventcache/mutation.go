package eventcache

import (
	"errors"
	"fmt"
	"sort"

	gocmp "github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/equality"
)

// MutationError reports a cached object that was changed in place. Objects handed out by
// a Store, a handler's event or a reconciler's request are the cache's own and must be
// treated as read-only (copy them with DeepCopy before changing them): a change made in
// place is seen by every other reader and is lost, or worse, compared against, at the
// next update. A Writer with DetectMutations finds such changes.
type MutationError struct {
	// Key is the key of the mutated object.
	Key string
	// Diff is the change, as go-cmp prints it: - the object as cached, + as it is now.
	Diff string
}

// Error names the key and shows the change.
func (e *MutationError) Error() string {
	return fmt.Sprintf("cached object %s was changed in place; cached objects are read-only, change a DeepCopy (-cached +now):\n%s", e.Key, e.Diff)
}

// ErrMutationDetectorOff is returned by CheckMutations on a Writer that does not detect
// mutations.
var ErrMutationDetectorOff = errors.New("mutation detector off")

// DetectMutations makes the Writer keep a deep copy of every object it stores and compare
// the object with it when the object is replaced or deleted, and on CheckMutations: a
// difference means someone changed a cached object in place. A ResourceTrackingConsumer
// reports each difference found during its writes as a *MutationError, with the errors of
// the batch it found it in. It costs a deep copy per write and doubles the cache's memory:
// it is meant for tests, like client-go's KUBE_CACHE_MUTATION_DETECTOR. Call it before the
// first write and before the Writer is shared.
func (w *Writer[T]) DetectMutations() {
	w.s.copies = make(map[string]T)
}

// takeMutations returns the mutations found by writes since the last call.
func (w *Writer[T]) takeMutations() []error {
	s := w.s
	if s.copies == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	found := s.found
	s.found = nil
	return found
}

// CheckMutations compares every stored object with the copy taken when it was stored and
// returns the differences, as *MutationError joined, in key order.
func (w *Writer[T]) CheckMutations() error {
	s := w.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.copies == nil {
		return ErrMutationDetectorOff
	}
	keys := make([]string, 0, len(s.items))
	for key := range s.items {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var errs []error
	for _, key := range keys {
		if err := s.mutation(key, s.items[key].obj); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mutation compares obj with the copy kept for key. Called with mu held.
func (s *Store[T]) mutation(key string, obj T) error {
	kept, ok := s.copies[key]
	if !ok || equality.Semantic.DeepEqual(kept, obj) {
		return nil
	}
	return &MutationError{Key: key, Diff: gocmp.Diff(kept, obj)}
}

// keepCopy records obj's state for key, checking the state it replaces first. Called with
// mu held, when the detector is on.
func (s *Store[T]) keepCopy(key string, prior T, existed bool, obj T) {
	if existed {
		if err := s.mutation(key, prior); err != nil {
			s.found = append(s.found, err)
		}
	}
	copied, ok := obj.DeepCopyObject().(T)
	if !ok {
		// A DeepCopyObject that returns another type: nothing to compare against.
		delete(s.copies, key)
		return
	}
	s.copies[key] = copied
}

// dropCopy checks the deleted object's last state and forgets its copy. Called with mu
// held, when the detector is on.
func (s *Store[T]) dropCopy(key string, prior T) {
	if err := s.mutation(key, prior); err != nil {
		s.found = append(s.found, err)
	}
	delete(s.copies, key)
}
