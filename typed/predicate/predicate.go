package predicate

import (
	"fmt"
	"maps"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
)

// Predicate decides whether an event reconciles its key: a typed.Loop (typed.NewLoop) or a typed.Related
// source enqueues the key of an event only when every one of its predicates returns
// true. A predicate sees the whole event: its Type, its Object, the Prior state the cache
// held before it, whether it comes from a relist or resync (Sync) and the Key.
//
// It runs on the controller's handler goroutine, so it must be fast and must not block;
// it must not modify the objects, which are the cache's. A predicate that panics lets the
// event through (a reconcile too many is harmless, a lost one is not) and the panic is
// reported as the Loop's error.
//
// The ready predicates (GenerationChanged, LabelsChanged, AnnotationsChanged,
// ResourceVersionChanged) are generic functions that can be passed as they are, without
// type arguments: loop, err := typed.NewLoop(c, r, opts, predicate.GenerationChanged).
type Predicate[T event.Object] func(e event.Event[T]) bool

// GenerationChanged passes additions, deletions, and modifications that changed
// metadata.generation: the API server increments it on writes to an object's spec, not
// on writes to its status or metadata, so a controller that writes status does not
// reconcile its own writes. Like controller-runtime's GenerationChangedPredicate, it
// filters resyncs and relists that bring the same generation again (a status change
// missed while the watch was down is not reconciled either), and it does not suit kinds
// whose generation never changes: ConfigMaps and Secrets have none, and custom resources
// have one only with the status subresource enabled. A modification whose prior state is
// unknown passes.
func GenerationChanged[T event.Object](e event.Event[T]) bool {
	return changed(e, func(prior, cur T) bool { return prior.GetGeneration() != cur.GetGeneration() })
}

// LabelsChanged passes additions, deletions, and modifications that changed the object's
// labels (a nil and an empty set are the same). A modification whose prior state is
// unknown passes.
func LabelsChanged[T event.Object](e event.Event[T]) bool {
	return changed(e, func(prior, cur T) bool { return !maps.Equal(prior.GetLabels(), cur.GetLabels()) })
}

// AnnotationsChanged passes additions, deletions, and modifications that changed the
// object's annotations (a nil and an empty set are the same). A modification whose prior
// state is unknown passes.
func AnnotationsChanged[T event.Object](e event.Event[T]) bool {
	return changed(e, func(prior, cur T) bool { return !maps.Equal(prior.GetAnnotations(), cur.GetAnnotations()) })
}

// ResourceVersionChanged passes additions, deletions, and modifications that changed the
// object's resource version: it filters periodic resyncs, which bring the same state
// again, and lets every real write through. A modification whose prior state is unknown
// passes.
func ResourceVersionChanged[T event.Object](e event.Event[T]) bool {
	return changed(e, func(prior, cur T) bool { return prior.GetResourceVersion() != cur.GetResourceVersion() })
}

// changed passes every event but a modification with both states known, which passes
// when differ says they differ. Additions and deletions always pass: a predicate on a
// change cannot judge them, and dropping a deletion would leave its cleanup undone.
func changed[T event.Object](e event.Event[T], differ func(prior, cur T) bool) bool {
	var zero T
	if e.Type != event.Modified || e.Prior == zero || e.Object == zero {
		return true
	}
	return differ(e.Prior, e.Object)
}

// And passes an event that every one of preds passes, stopping at the first that does
// not; with no predicates it passes every event. It returns nil if any of preds is nil,
// which NewLoop and Related refuse with an error wrapping controller.ErrNilArgument.
func And[T event.Object](preds ...Predicate[T]) Predicate[T] {
	if hasNil(preds) {
		return nil
	}
	return func(e event.Event[T]) bool {
		for _, p := range preds {
			if !p(e) {
				return false
			}
		}
		return true
	}
}

// Or passes an event that any of preds passes, stopping at the first that does; with no
// predicates it passes no event. It returns nil if any of preds is nil, which NewLoop
// and Related refuse with an error wrapping controller.ErrNilArgument.
func Or[T event.Object](preds ...Predicate[T]) Predicate[T] {
	if hasNil(preds) {
		return nil
	}
	return func(e event.Event[T]) bool {
		for _, p := range preds {
			if p(e) {
				return true
			}
		}
		return false
	}
}

// Not passes the events pred filters out, and filters out those it passes. It returns nil
// if pred is nil, which NewLoop and Related refuse with an error wrapping
// controller.ErrNilArgument.
//
// Not of a ready predicate filters every addition and deletion, which the ready ones
// always pass. A Loop whose predicates filter deletions still gives a reconcile of the
// key that is due anyway the deletion's last state, but reconciles no deletion for itself.
func Not[T event.Object](pred Predicate[T]) Predicate[T] {
	if pred == nil {
		return nil
	}
	return func(e event.Event[T]) bool { return !pred(e) }
}

func hasNil[T event.Object](preds []Predicate[T]) bool {
	for _, p := range preds {
		if p == nil {
			return true
		}
	}
	return false
}

// Check returns an error wrapping controller.ErrNilArgument that names the first nil one
// of preds, whose are they.
func Check[T event.Object](preds []Predicate[T], whose string) error {
	for i, p := range preds {
		if p == nil {
			return fmt.Errorf("%w: %s predicate %d", controller.ErrNilArgument, whose, i)
		}
	}
	return nil
}

// Passes reports whether e passes every one of preds. A predicate that panics counts as
// passing, and the panic is handed to report.
func Passes[T event.Object](preds []Predicate[T], e event.Event[T], report func(error)) bool {
	for i, p := range preds {
		if !pass(i, p, e, report) {
			return false
		}
	}
	return true
}

func pass[T event.Object](i int, p Predicate[T], e event.Event[T], report func(error)) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = true
			report(fmt.Errorf("predicate %d panicked on %s of %s: %v", i, e.Type, e.Key, v))
		}
	}()
	return p(e)
}
