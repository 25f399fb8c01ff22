// Package event defines the typed events that flow through typedinformer's pipeline, the
// object constraint every stage shares, the functions that turn an object into its
// cache key, and the notes a stage keeps of an object to judge the next state without
// reading the one it holds ([Version] orders resource versions as [NotNewer] does;
// [UIDNote] tells another object by its UID, as [OtherObject] does from both objects).
//
// An [Event] is a value: it carries the object's new state (or, for a deletion, its last
// state), the state the consumer knew before the event, and where the event came from (a
// watch, or a relist or resync). Every stage passes events by value, so no stage can
// change what another has already seen.
package event

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is the constraint on every object type the pipeline carries: a pointer to an API
// struct such as *corev1.Pod, *unstructured.Unstructured or a CRD's Go type. It is both a
// runtime.Object and a metav1.Object (what controller-runtime calls client.Object), and it
// is comparable so that the pipeline can tell a nil object from a real one without
// reflection.
type Object interface {
	comparable
	runtime.Object
	metav1.Object
}

// Type says what happened to an object.
type Type uint8

// The three event types. The zero Type is not valid, so an Event that was never filled in
// is caught instead of being taken for an addition.
const (
	// Added: the object was created, or is seen for the first time.
	Added Type = iota + 1
	// Modified: the object changed; Event.Prior holds the previous state when known.
	Modified
	// Deleted: the object is gone; Event.Object holds its last state.
	Deleted
)

// String returns the name Kubernetes uses for the event type on the wire.
func (t Type) String() string {
	switch t {
	case Added:
		return "ADDED"
	case Modified:
		return "MODIFIED"
	case Deleted:
		return "DELETED"
	default:
		return fmt.Sprintf("Type(%d)", uint8(t))
	}
}

// Event is one change to one object.
//
// For Added and Modified, Object is the new state. For Deleted, Object is the object's
// final state as the server reported it or, when FinalStateUnknown is set, the newest
// state the pipeline knew. Prior is the state the consumer held for the key before this
// event; it is the zero value (nil) when the key was not known.
//
// Object and Prior are the cache's own objects, shared with every other handler and
// reader: treat them as read-only and change a DeepCopy (controller.Options has a
// mutation detector for tests).
type Event[T Object] struct {
	// Type is what happened: Added, Modified or Deleted.
	Type Type
	// Key is the object's key as the pipeline computed it, with the controller's key
	// function. Events handed to handlers carry it, so that no layer above the pipeline
	// computes a key its own way; events entering the cache do not need it.
	Key string
	// Object is the new state, or for a deletion the last state.
	Object T
	// Prior is the state the consumer knew before this event, or nil. Only events that
	// have passed through the consumer carry it; events entering the cache do not.
	Prior T
	// Sync is true when the event comes from a relist (Replace) or a periodic resync
	// (Synchronize) rather than from a watch.
	Sync bool
	// FinalStateUnknown is true for a deletion synthesised by a relist: the object was
	// absent from the list, so its final state was never seen and Object is the last state
	// the pipeline knew.
	FinalStateUnknown bool
}

// HasPrior reports whether the consumer knew the key before this event.
func (e Event[T]) HasPrior() bool {
	var zero T
	return e.Prior != zero
}

// String returns a short human-readable description, used in logs and test failures.
func (e Event[T]) String() string {
	var zero T
	if e.Object == zero {
		return e.Type.String() + " <nil>"
	}
	s := fmt.Sprintf("%s %s/%s@%s", e.Type, e.Object.GetNamespace(), e.Object.GetName(), e.Object.GetResourceVersion())
	if e.Sync {
		s += " sync"
	}
	if e.FinalStateUnknown {
		s += " final-state-unknown"
	}
	return s
}
