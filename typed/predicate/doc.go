// Package predicate holds the filters a typed.Loop or typed.Related applies to events
// before it enqueues their keys: Predicate, the ready ones (GenerationChanged,
// LabelsChanged, AnnotationsChanged, ResourceVersionChanged), and the combinators And,
// Or and Not. Each sees the whole event and the prior state the cache held, typed: no
// casts, and no object type to spell for the ready ones, which Go infers.
//
// A predicate runs on its source's handler goroutine: it must be fast, must not block and
// must not modify the cache's objects. One that panics lets its event through (a
// reconcile too many is harmless, a lost one is not), and Passes reports the panic. A nil
// predicate, or a combinator of one, is an error wrapping controller.ErrNilArgument
// (Check), never a panic. A deletion a Loop's predicates filter out still gives its last
// state to a reconcile of the key that is due anyway, and is kept no longer than that.
//
// Check and Passes are what a Loop and Related call; a source of one's own applies
// predicates the same way with them.
package predicate
